//! The saved-plan approval the capability runs in every `apply`, on the plan
//! file itself (`terraform show -json PLANFILE` by the host), whatever the
//! plugin checked before: the rules are `cradle-terraform-logic`'s `approve`,
//! the same code the terraform plugin runs (one implementation).
//!
//! Contract ([`ApplyRule::expected`]):
//! - a plan made without `-destroy` is approved for exactly the module's one
//!   resource: create, update or no-op; a replacement only when the plugin's
//!   terraform grant is `destructive`; a delete never;
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
}

impl ApplyRule {
    /// The VM resource of `flavour`'s module.
    pub fn for_flavour(flavour: Flavour, destructive: bool) -> ApplyRule {
        let flavour = match flavour {
            Flavour::Telmate => cradle_terraform_logic::Flavour::Telmate,
            Flavour::Bpg => cradle_terraform_logic::Flavour::Bpg,
        };
        ApplyRule { resource: Expected::for_flavour(flavour, Mode::Apply, false), destructive }
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
        ApplyRule { resource, destructive }
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
        Ok(Expected { mode, allow_replacement: mode == Mode::Apply && self.destructive, ..self.resource.clone() })
    }
}
