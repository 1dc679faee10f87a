//! The approval of a maintenance plan (`plan-update`, wit/maintenance.wit):
//! the saved plan of a VM that exists and is complete, made from the module
//! as the inventory now describes it.
//!
//! Contract: [`check_update`] runs [`super::check`] in [`Mode::Apply`] (so
//! every rule of a provisioning plan holds: one resource, no data source, no
//! provisioner, no import, no move, ...; a delete is refused there) and then
//! refuses a create: the VM is not in its module's state, which maintenance
//! never repairs (provisioning or a reviewed `terraform import` does). An
//! update or a no-op is approved; a replacement only with `allow_replacement`
//! (the inventory's `vms_terraform_allow_replacement`), and the refusal says
//! which flag allows it.

use super::{Approval, ApprovedAction, Expected, Mode, Rejection, check};
use crate::Flavour;

/// Why a maintenance plan is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpdateRefusal {
    /// A rule every saved plan must pass.
    #[error("{vm}: {rejection}{}", replacement_hint(.rejection))]
    Rejected {
        /// The VM.
        vm: String,
        /// What the plan does wrong (boxed: a rejection is large).
        rejection: Box<Rejection>,
    },
    /// The plan would create the VM: it is not in its module's state.
    #[error(
        "{vm}: the maintenance plan would create {address}, so the VM is not in its module's terraform state; \
         nothing was planned for it — run `cradle provision` (or review a `terraform import`) first"
    )]
    WouldCreate {
        /// The VM.
        vm: String,
        /// The resource address.
        address: String,
    },
}

fn replacement_hint(r: &Rejection) -> &'static str {
    match r {
        Rejection::ReplacementNotAllowed { .. } => {
            " (maintenance: set vms_terraform_allow_replacement: true for this host to allow it)"
        }
        _ => "",
    }
}

/// Approve the maintenance plan `plan_json` (`terraform show -json`) of VM
/// `vm` in `flavour`'s module.
pub fn check_update(
    plan_json: &str,
    flavour: Flavour,
    allow_replacement: bool,
    vm: &str,
) -> Result<Approval, UpdateRefusal> {
    let expected = Expected::for_flavour(flavour, Mode::Apply, allow_replacement);
    let approval = check(plan_json, &expected)
        .map_err(|rejection| UpdateRefusal::Rejected { vm: vm.to_string(), rejection: Box::new(rejection) })?;
    if approval.action == ApprovedAction::Create {
        return Err(UpdateRefusal::WouldCreate { vm: vm.to_string(), address: expected.address });
    }
    Ok(approval)
}
