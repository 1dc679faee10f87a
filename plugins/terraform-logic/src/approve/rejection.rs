//! Why a plan was not approved. Every message names the expected address, the
//! offending object and action, and what the operator should do; nothing has been
//! applied when any of these is returned.

use super::action::{Action, ActionReason};
use crate::ResourceKind;

/// A plan cradle refuses to apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error(
        "refusing the plan for {address}: `terraform show -json` output is not a readable plan ({reason}); \
         nothing was applied — check the Terraform version and plan again"
    )]
    Unparseable { address: String, reason: String },

    #[error(
        "refusing the plan for {address}: JSON format_version {} is not supported (only 1.x is); \
         nothing was applied — use a Terraform release that prints format 1.x or a cradle that knows this format",
        .format_version.as_deref().map_or_else(|| "(missing)".to_owned(), |v| format!("{v:?}"))
    )]
    UnsupportedFormat { address: String, format_version: Option<String> },

    #[error(
        "refusing the plan for {address}: Terraform reports it as errored (planning failed); \
         nothing was applied — read Terraform's diagnostics, fix the cause and plan again"
    )]
    Errored { address: String },

    #[error(
        "refusing the plan for {address}: it is incomplete (`complete: false`, more plan/apply rounds would follow); \
         nothing was applied — cradle applies only complete single-round plans; review the module"
    )]
    Incomplete { address: String },

    #[error(
        "refusing the plan for {address}: it defers {count} change(s) ({addresses:?}) to a later round; \
         nothing was applied — cradle's module never needs deferral; review the module and do not use -allow-deferral"
    )]
    Deferred { address: String, count: usize, addresses: Vec<String> },

    #[error(
        "refusing the plan for {address}: it invokes {count} Terraform action(s), side effects outside resource changes; \
         nothing was applied — cradle's module has no `action` blocks; review the module directory"
    )]
    ActionInvocations { address: String, count: usize },

    #[error(
        "refusing the plan for {address}: Terraform marks it not applyable although it would {action} {address}; \
         nothing was applied — plan again and review Terraform's output"
    )]
    NotApplyable { address: String, action: Action },

    #[error(
        "refusing the plan for {address}: `{found}` ({action}) is in a child module; cradle's module has none — \
         nothing was applied; review the module directory and its state by hand"
    )]
    ChildModule { address: String, found: String, action: Action },

    #[error(
        "refusing the plan for {address}: it also plans {action} for `{found}`, which cradle does not manage; \
         nothing was applied — review the module directory and its state (do not delete the state) before retrying"
    )]
    OtherResource { address: String, found: String, action: Action },

    #[error(
        "refusing the plan for {address}: Terraform reports `{found}` as changed outside Terraform ({action}), \
         but cradle's module manages only {address}; nothing was applied — review the module's state by hand"
    )]
    OtherResourceDrift { address: String, found: String, action: Action },

    #[error(
        "refusing the plan for {address}: data source `{found}` ({action}) belongs to provider {provider}, \
         not to the VM's provider; nothing was applied — cradle's module reads no other data sources; review the module"
    )]
    ForeignDataSource { address: String, found: String, provider: String, action: Action },

    #[error(
        "refusing the plan for {address}: it reads data source `{found}` ({action}); cradle's module declares no \
         data sources, so the module directory holds something cradle did not render; nothing was applied — \
         review the module directory by hand"
    )]
    DataSource { address: String, found: String, action: Action },

    #[error(
        "refusing the plan for {address}: its {part} holds `{found}`, but cradle's module declares only {address}; \
         nothing was applied — the plan was not made from cradle's rendered module; review the module directory by hand"
    )]
    NotRendered { address: String, found: String, part: &'static str },

    #[error(
        "refusing the plan for {address}: the change at {address} ({action}) is for {found}, expected {expected}; \
         nothing was applied — check the configured Terraform provider flavour and the module's state before retrying"
    )]
    WrongResource { address: String, action: Action, found: Box<ResourceKind>, expected: Box<ResourceKind> },

    #[error(
        "refusing the plan for {address}: it plans {action} for a deposed object of {address} (deposed key {deposed}), \
         left over from an earlier failed replacement; nothing was applied — find that VM and review it and the state by hand"
    )]
    DeposedObject { address: String, deposed: String, action: Action },

    #[error(
        "refusing the plan for {address}: it imports an existing object into state ({action}); nothing was applied — \
         cradle never imports; remove the import and review which VM the state should own"
    )]
    Import { address: String, action: Action },

    #[error(
        "refusing the plan for {address}: it moves state from `{previous_address}` to {address} ({action}); \
         nothing was applied — cradle never re-addresses state; review the module directory and its state"
    )]
    Moved { address: String, previous_address: String, action: Action },

    #[error(
        "refusing the plan for {address}: it would {action}, leaving a VM Terraform no longer manages; \
         nothing was applied — review the module and its state; cradle never forgets objects"
    )]
    Forget { address: String, action: Action },

    #[error(
        "refusing the plan for {address}: it would delete {address} while provisioning; nothing was applied — \
         the inventory no longer matches the module: use the removal workflow to delete a VM"
    )]
    DeleteWhileProvisioning { address: String },

    #[error(
        "refusing the plan for {address}: it would {action} {address}{}, destroying the existing VM; nothing was applied — \
         if the VM may be rebuilt, allow replacement for this host explicitly; otherwise revert the inventory change",
        why(.reason.as_ref(), .replace_paths)
    )]
    ReplacementNotAllowed { address: String, action: Action, reason: Option<ActionReason>, replace_paths: Vec<String> },

    #[error(
        "refusing the plan for {address}: `{found}` has {action}; nothing was applied — \
         this cradle does not know that action; review the plan by hand"
    )]
    UnknownAction { address: String, found: String, action: Action },

    #[error(
        "refusing the plan for {address}: `{found}` has unknown resource mode {mode:?} ({action}); nothing was applied — \
         review the plan by hand"
    )]
    UnknownMode { address: String, found: String, mode: String, action: Action },

    #[error(
        "refusing the plan for {address}: `{found}` is inconsistent: {detail}; nothing was applied — review the plan by hand"
    )]
    Inconsistent { address: String, found: String, detail: String },

    #[error(
        "refusing the plan for {address}: the plan has no entry for {address} at all; nothing was applied — \
         the plan was not made from cradle's rendered module; re-render and plan again"
    )]
    MissingFromPlan { address: String },

    #[error(
        "refusing the plan for {address}: Terraform found that {address} was deleted outside Terraform, \
         so applying would create it again; nothing was applied — find out what removed the VM, then review the state \
         (do not delete the state or `terraform import` without review)"
    )]
    DeletedOutsideTerraform { address: String },

    #[error(
        "refusing the destroy plan for {address}: it deletes nothing; nothing was applied — \
         the state has no {address}: check ownership and the state before retrying"
    )]
    NothingToDestroy { address: String },

    #[error(
        "refusing the destroy plan for {address}: it plans {action} for `{found}`, but a removal may only delete \
         {address}; nothing was applied — plan with `terraform plan -destroy` in the host's own module and review"
    )]
    UnexpectedInDestroy { address: String, found: String, action: Action },
}

fn why(reason: Option<&ActionReason>, replace_paths: &[String]) -> String {
    match (reason, replace_paths.is_empty()) {
        (None, true) => String::new(),
        (Some(reason), true) => format!(" because {reason}"),
        (None, false) => format!(" because of {}", replace_paths.join(", ")),
        (Some(reason), false) => format!(" because {reason} ({})", replace_paths.join(", ")),
    }
}
