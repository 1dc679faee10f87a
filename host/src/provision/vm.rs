//! The `vm` value a provisioning workflow receives: [`WorkflowVm`], built from
//! the host's plan and guest settings and converted to a script value once
//! (`rhai::serde::to_dynamic`), so its shape is the struct's: keys as the
//! field names, `()` for a none, INT for the integers.

use rhai::{Dynamic, EvalAltResult};
use serde::Serialize;

use super::DEFAULT_USER;
use crate::inventory::{GuestVars, Inventory, InventoryError, Nic, SpecRecord, VmPlan};

/// The `vm` a workflow receives (see the module doc), converted to a script
/// value once by [`WorkflowVm::to_dynamic`]: keys as the field names, `()`
/// for a none.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkflowVm {
    /// The canonical VM name.
    pub name: String,
    /// The guest's host name (the VM name).
    pub hostname: String,
    /// The node the VM must run on.
    pub node: String,
    /// The backend's `vm-spec` (`vmid` `()` until the workflow allocates one).
    pub spec: SpecRecord,
    /// The guest login.
    pub ssh: WorkflowSsh,
    /// The NICs with their DNS settings.
    pub nics: Vec<Nic>,
    /// The guest settings of the inventory (`packages`, `timezone`, `fqdn`,
    /// `snippet_storage`, `authorized_keys`, `dns`, `wait`), at the top level
    /// of `vm` beside the plan's keys.
    #[serde(flatten)]
    pub guest: GuestVars,
    /// `vms_type` (`()` for the built-in template type).
    pub vm_type: Option<String>,
    /// Every variable of the host as the inventory merges them (values as
    /// written: templates are not rendered), for a VM type's own settings
    /// (`vm.vars.homeassistant_image`); credential-like names are left out
    /// (`secret_like`).
    pub vars: serde_json::Map<String, serde_json::Value>,
}

/// `vm.ssh`: how the workflow reaches the guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkflowSsh {
    /// `ansible_host`.
    pub host: String,
    /// `ansible_port`.
    pub port: u16,
    /// `ansible_user`, default [`DEFAULT_USER`].
    pub user: String,
}

/// Variables that look like credentials (`ansible_password`, `*_token`,
/// `vault_*`) stay out of `vm.vars`: a workflow has no use for them and a
/// script value can end up in an error message.
fn secret_like(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    ["pass", "secret", "token", "vault", "private_key", "api_key"].iter().any(|w| n.contains(w))
}

impl WorkflowVm {
    /// The `vm` of `plan`, with the guest settings of its host in `inv`.
    pub fn new(plan: &VmPlan, inv: &Inventory) -> Result<WorkflowVm, InventoryError> {
        let spec = match plan.vmid {
            Some(_) => plan.vm_spec(None)?,
            None => plan.vm_spec_unallocated(),
        };
        let guest = inv.guest_vars(plan.host.as_str())?;
        let vars = inv.host_vars(plan.host.as_str())?;
        Ok(WorkflowVm {
            name: plan.name.clone(),
            hostname: plan.name.clone(),
            node: plan.node.clone(),
            spec,
            ssh: WorkflowSsh {
                host: plan.ssh.host.clone(),
                port: plan.ssh.port,
                user: plan.ssh.user.clone().unwrap_or_else(|| DEFAULT_USER.into()),
            },
            nics: plan.nics.clone(),
            guest,
            vm_type: plan.vm_type.clone(),
            vars: vars.into_iter().filter(|(k, _)| !secret_like(k)).collect(),
        })
    }

    /// The script value.
    pub fn to_dynamic(&self) -> Result<Dynamic, Box<EvalAltResult>> {
        rhai::serde::to_dynamic(self)
    }
}
