//! Saved-plan approval: may cradle apply this `terraform show -json <planfile>`?
//!
//! # Contract
//!
//! [`check`] takes the JSON text of a saved plan and what cradle expects of it
//! ([`Expected`]: the one resource a host's module declares, its type and provider,
//! [`Mode`] and whether replacement is allowed) and returns either an [`Approval`]
//! (the [`ApprovedAction`] plus summary lines in operator terms) or a [`Rejection`].
//! Anything it does not positively recognise is rejected: cradle then applies nothing.
//!
//! [`Mode::Apply`] (create/provision) approves, for exactly the expected address:
//! `["create"]` → [`ApprovedAction::Create`], `["update"]` → [`ApprovedAction::Update`],
//! `["no-op"]` → [`ApprovedAction::NoOp`], and `["delete","create"]` /
//! `["create","delete"]` → [`ApprovedAction::Replace`] only with
//! [`Expected::allow_replacement`]. [`Mode::Destroy`] (removal) approves only a plan
//! whose single resource change is the expected address's `["delete"]`
//! ([`ApprovedAction::Delete`]).
//!
//! # Failure modes (each a [`Rejection`] variant)
//!
//! * Not a plan / wrong JSON types ([`Rejection::Unparseable`]); `format_version`
//!   missing or not `1.x` ([`Rejection::UnsupportedFormat`]).
//! * Plan-level: `errored: true`, `complete: false`, any `deferred_changes`, any
//!   `action_invocations` / `deferred_action_invocations` (side effects outside
//!   resource changes), `applyable: false` with a real change to make.
//! * At the expected address: another resource type or provider, a data-source mode,
//!   an import (`change.importing` or `generated_config`), a move
//!   (`previous_address`), `["forget"]` / `["create","forget"]`, a delete while
//!   provisioning, a replacement not allowed (whatever its `action_reason`:
//!   tainted, cannot update, `-replace`, `replace_triggered_by`), a `replace_*`
//!   reason on an action that is not a replacement, a second entry for the same
//!   object, an unknown action or mode, a deposed object (`deposed`), or no entry at all.
//! * Any entry (change or drift) whose `address` is not the one its own `module_address`,
//!   `mode`, `type`, `name` and `index` make (`address: "proxmox_vm_qemu.vm"` with
//!   `name: "evil"`): Terraform prints both from one address, so such a plan was not
//!   printed by Terraform ([`Rejection::Inconsistent`]).
//! * Anywhere else: any other managed address, whatever its action (even
//!   `["no-op"]`: cradle's module holds one resource, so another one in state means the
//!   directory holds something cradle did not render); anything in a child module; any
//!   data source at all, in `resource_changes` or `prior_state`, the VM provider's own
//!   included ([`Rejection::DataSource`], [`Rejection::ForeignDataSource`]: cradle's
//!   module reads none); in [`Mode::Destroy`] any second change at all.
//! * In `planned_values`, any resource but the expected one as rendered; in
//!   `configuration`, any block but the expected resource's, a provisioner on it, or
//!   any module call ([`Rejection::NotRendered`]).
//!
//! The first problem found is reported, in this order: plan level, address
//! consistency, drift, the expected address, the other resource changes in plan
//! order, `prior_state`, outputs, `planned_values`, `configuration`, a missing entry,
//! `applyable`.
//!
//! # Decisions where the format leaves room
//!
//! * **No-op.** Terraform lists every managed resource it knows, unchanged ones as
//!   `["no-op"]` (real 1.11.4 `02-noop.json`, `null_provider_update_plan.json`);
//!   `resource_changes` is only omitted when configuration *and* state are empty.
//!   cradle's rendered module always declares the resource, so an Apply plan with no
//!   entry for it was not made from that module: [`Rejection::MissingFromPlan`], never
//!   NoOp. A Destroy plan that deletes nothing is [`Rejection::NothingToDestroy`]
//!   (use [`crate::ownership`] to learn that the state is empty instead).
//! * **`format_version`.** Major `1` with any numeric minor is accepted (`1.0` in the
//!   older test fixtures, `1.2` from Terraform 1.5 on); unknown keys are ignored, as
//!   the format's rule for minor versions says. `terraform_version` is not checked.
//! * **`applyable`.** `false` is normal for a no-change plan and is accepted with
//!   NoOp; with any other action it contradicts the changes and is rejected. `true`
//!   with NoOp is accepted (e.g. only outputs change). Absent (Terraform < 1.8): ignored.
//!   `complete` / `errored` absent: treated as complete and not errored.
//! * **`resource_drift`** (changes made outside Terraform) is informational for the
//!   expected address — cradle's workflow migrates and starts VMs through the
//!   Proxmox API after creation, so drift there is expected — and appears in the
//!   summary. A drift `["delete"]` of the expected address (the VM vanished outside
//!   Terraform) is rejected ([`Rejection::DeletedOutsideTerraform`]): applying would
//!   silently create it again. Drift of any other object is rejected like any other
//!   resource.
//! * **`relevant_attributes`** only says which drifted attributes fed the plan; it is
//!   not needed since all drift of the expected address is summarised and all other
//!   drift rejected, so it is ignored.
//! * **`output_changes`** never touch infrastructure (root outputs only): they are
//!   accepted and summarised by name and action (values may be secrets); an output with
//!   an unrecognised action is rejected.
//! * **`prior_state`** is scanned only for data sources: those read during planning
//!   appear nowhere else; any is rejected. Managed objects in `prior_state` also
//!   appear in `resource_changes`, which is authoritative, so they are not rechecked.
//! * **`planned_values`** is derived from the same changes (minus unknowns); it is
//!   checked to hold nothing but the expected resource, in case a hand-made plan says
//!   otherwise there. **`configuration`** is where a provisioner (which runs on the
//!   control node and shows in no resource change) or a module call with no instances
//!   would show; both are refused. `variables` and `checks` are not consulted.
//! * **Data sources** (`mode: "data"` or a `["read"]` action): cradle's rendered module
//!   declares none, so any one is rejected, whatever its provider or mode (until issue
//!   32 the expected provider's own reads were allowed: a `data.proxmox_vm_qemu` read,
//!   or a `terraform_data` of `mode: "data"`, then passed beside the VM's create).

mod action;
mod address;
mod plan;
mod rejection;
mod rules;
mod summary;
pub mod update;

#[cfg(test)]
mod tests;

pub use action::{Action, ActionReason};
pub use rejection::Rejection;

use crate::Flavour;

/// What the plan is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Creating / provisioning: create, update or leave the VM unchanged.
    Apply,
    /// Removal: delete the VM and nothing else.
    Destroy,
}

/// What cradle expects the plan to touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// The resource's absolute address, e.g. `proxmox_vm_qemu.vm`.
    pub address: String,
    /// Its resource type, e.g. `proxmox_vm_qemu`.
    pub resource_type: String,
    /// Its provider's `provider_name`, e.g. `registry.terraform.io/telmate/proxmox`.
    pub provider_name: String,
    /// Approve a replacement of the expected address (Apply mode only).
    pub allow_replacement: bool,
    pub mode: Mode,
}

impl Expected {
    /// The expectation for a host's VM resource of the given flavour.
    pub fn for_flavour(flavour: Flavour, mode: Mode, allow_replacement: bool) -> Self {
        Self {
            address: flavour.address().to_owned(),
            resource_type: flavour.resource_type().to_owned(),
            provider_name: flavour.provider_name().to_owned(),
            allow_replacement,
            mode,
        }
    }
}

/// What the approved plan will do to the expected address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApprovedAction {
    Create,
    Update,
    NoOp,
    /// Destroy and re-create (only with [`Expected::allow_replacement`]).
    Replace,
    /// Only in [`Mode::Destroy`].
    Delete,
}

/// An approved plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    pub action: ApprovedAction,
    /// What will happen, one line per item, in operator terms: first the expected
    /// address's change (`create proxmox_vm_qemu.vm`,
    /// `update proxmox_vm_qemu.vm: memory 2048 → 4096`), then drift, data sources
    /// and outputs. Sensitive values are never included.
    pub summary: Vec<String>,
}

/// Decide whether the saved plan `plan_json` (`terraform show -json <planfile>`) may
/// be applied for `expected`.
pub fn check(plan_json: &str, expected: &Expected) -> Result<Approval, Rejection> {
    rules::check(plan_json, expected)
}
