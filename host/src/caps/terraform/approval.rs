//! The saved-plan approval the capability runs in every `apply`, on the plan
//! file itself (`terraform show -json PLANFILE` by the host), whatever the
//! plugin checked before: the rules are `cradle-terraform-logic`'s `approve`,
//! the same code the terraform plugin runs (one implementation).
//!
//! Contract ([`ApplyRule::expected`]):
//! - a plan made without `-destroy` is approved for exactly the module's one
//!   resource: create, update or no-op; a replacement only when the plugin's
//!   terraform grant is `destructive` AND the run's VM of the module's VMID
//!   has the inventory's `vms_terraform_allow_replacement` (the host reads it
//!   from the run's VM binding, [`crate::caps::policy::ScopedVm`], never from
//!   the plugin); a delete never;
//! - a plan made with `-destroy` (the host records which) is approved only as
//!   the delete of exactly that resource and nothing else, and only when the
//!   grant is `destructive` (checked again here, not only at `plan`).
//!
//! Failure modes: a refusal is `denied`, naming the module and the rule, and
//! nothing is applied.

use cradle_terraform_logic::approve::{Expected, Mode};

use super::Flavour;
use crate::contract::{CapError, ErrorKind};

/// What `apply` may apply in one module.
#[derive(Debug, Clone)]
pub struct ApplyRule {
    /// The module's one resource (address, type, provider), as rendered.
    resource: Expected,
    /// The plugin's `terraform.destructive` grant.
    pub destructive: bool,
    /// The run's VM the module creates (its name) and its inventory flag
    /// `vms_terraform_allow_replacement`; `None` when the call is bound to no
    /// VM of the module's VMID (then no replacement is approved).
    pub vm_flag: Option<(String, bool)>,
}

impl ApplyRule {
    /// The VM resource of `flavour`'s module.
    pub fn for_flavour(flavour: Flavour, destructive: bool) -> ApplyRule {
        let flavour = match flavour {
            Flavour::Telmate => cradle_terraform_logic::Flavour::Telmate,
            Flavour::Bpg => cradle_terraform_logic::Flavour::Bpg,
        };
        ApplyRule { resource: Expected::for_flavour(flavour, Mode::Apply, false), destructive, vm_flag: None }
    }

    /// The rule for the module of the run's VM `name`, whose inventory sets
    /// `vms_terraform_allow_replacement` to `allows`.
    pub fn for_vm(mut self, name: &str, allows: bool) -> ApplyRule {
        self.vm_flag = Some((name.to_string(), allows));
        self
    }

    /// Both the grant and the VM's inventory flag allow a replacement.
    fn allows_replacement(&self) -> bool {
        self.destructive && self.vm_flag.as_ref().is_some_and(|(_, allows)| *allows)
    }

    /// What the host requires for a replacement, and what it found (for a refusal).
    pub fn replacement_requirement(&self, origin: &str) -> String {
        let flag = match &self.vm_flag {
            Some((name, allows)) => format!("the inventory's vms_terraform_allow_replacement for {name} is {allows}"),
            None => "this call is bound to no VM of the run with the module's VMID".to_string(),
        };
        format!(
            "the host applies a replacement only when {origin}.terraform.destructive is true (it is {}) and the inventory sets vms_terraform_allow_replacement=true for the VM ({flag})",
            self.destructive
        )
    }

    /// Another resource (terraform's built-in `terraform_data`, in tests that
    /// need no provider).
    #[cfg(test)]
    pub fn for_resource(resource_type: &str, name: &str, provider_name: &str, destructive: bool) -> ApplyRule {
        let resource = Expected {
            address: format!("{resource_type}.{name}"),
            resource_type: resource_type.into(),
            provider_name: provider_name.into(),
            allow_replacement: false,
            mode: Mode::Apply,
        };
        ApplyRule { resource, destructive, vm_flag: None }
    }

    /// What a plan of `mode` must hold; a destroy plan without the grant is refused.
    pub fn expected(&self, module: &str, origin: &str, mode: Mode) -> Result<Expected, CapError> {
        if mode == Mode::Destroy && !self.destructive {
            return Err(CapError::new(
                ErrorKind::Denied,
                format!(
                    "terraform: the saved plan of module `{module}` destroys {}, and {origin}.terraform.destructive is not true; nothing was applied",
                    self.resource.address
                ),
            ));
        }
        Ok(Expected {
            mode,
            allow_replacement: mode == Mode::Apply && self.allows_replacement(),
            ..self.resource.clone()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replacement_is_approved_only_with_the_destructive_grant_and_the_vms_inventory_flag() {
        let allowed =
            |rule: ApplyRule| rule.expected("web-1", "plugins.t.grants", Mode::Apply).expect("apply").allow_replacement;
        let rule = |destructive| ApplyRule::for_flavour(Flavour::Telmate, destructive);
        assert!(!allowed(rule(true)), "no VM of the run bound: no replacement");
        assert!(!allowed(rule(true).for_vm("web-1", false)), "the inventory does not allow it");
        assert!(!allowed(rule(false).for_vm("web-1", true)), "the grant does not allow it");
        assert!(allowed(rule(true).for_vm("web-1", true)));
        let why = rule(true).for_vm("web-1", false).replacement_requirement("plugins.t.grants");
        assert!(why.contains("vms_terraform_allow_replacement for web-1 is false"), "{why}");
    }
}
