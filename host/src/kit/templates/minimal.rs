//! {{name}}: a cradle plugin written by `cradle plugin new`. It plans VMs from
//! their spec and logs; it creates nothing. Give it the capabilities it needs
//! (`needs` below, and `[plugins.{{name}}.grants.CAPABILITY]` in cradle.toml)
//! as it grows; `cradle plugin new --backend` writes a complete backend.
//!
//! Build: `cradle plugin build`; try it: `cradle plugin test --check`.

use cradle_guest::lifecycle::{PlanAction, PlanOutcome};
use cradle_guest::log::{self, Level};
use cradle_guest::types::{Snippets, VmSpec, VmState};
use cradle_guest::{Backend, Error, Result};

cradle_guest::manifest! {
    name: "{{name}}",
    version: env!("CARGO_PKG_VERSION"),
    description: "Plans VMs from their spec and logs; creates nothing",
    needs: ["log"],
}

struct Plugin;

cradle_guest::export_backend!(Plugin);

/// What creating `vm` would do, one line each.
fn summary(vm: &VmSpec) -> Vec<String> {
    let mut lines = vec![format!(
        "create {} (vmid {}) on {} from {}: {} cores, {} MiB",
        vm.name, vm.vmid, vm.node, vm.template, vm.cores, vm.memory_mib
    )];
    for nic in &vm.nics {
        let address = nic.address.clone().unwrap_or_else(|| "dhcp".into());
        lines.push(format!("{} on {} address {address}", nic.slot, nic.bridge));
    }
    lines
}

impl Backend for Plugin {
    fn discover(vm: VmSpec) -> Result<Option<VmState>> {
        log::vm(Level::Debug, &vm, "this plugin knows no VMs");
        Ok(None)
    }

    fn check_ownership(_vm: VmSpec, found: Option<VmState>) -> Result<()> {
        match found {
            None => Ok(()),
            Some(state) => Err(Error::Conflict(format!(
                "{} exists but {{name}} owns nothing",
                state.name
            ))),
        }
    }

    fn plan(vm: VmSpec) -> Result<PlanOutcome> {
        Ok(PlanOutcome {
            action: PlanAction::Create,
            summary: summary(&vm),
            plan_id: None,
        })
    }

    fn create(vm: VmSpec, _snippets: Snippets) -> Result<VmState> {
        Err(Error::Invalid(format!(
            "{{name}} only plans; it cannot create {}",
            vm.name
        )))
    }

    fn reconcile(_vm: VmSpec, _found: VmState) -> Result<Vec<String>> {
        Ok(Vec::new())
    }

    fn remove(vm: VmSpec) -> Result<()> {
        Err(Error::Invalid(format!(
            "{{name}} only plans; it cannot remove {}",
            vm.name
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_names_the_vm_and_its_template() {
        let vm = VmSpec {
            name: "web-0".into(),
            vmid: 150,
            node: "pve1".into(),
            template: "debian-12-cloud".into(),
            storage: "local-lvm".into(),
            cores: 2,
            memory_mib: 2048,
            disk_gib: None,
            disks: vec![],
            nics: vec![],
            startup_order: None,
            tags: vec![],
            environment: "test".into(),
            allow_replacement: false,
        };
        assert!(summary(&vm)[0].contains("web-0 (vmid 150) on pve1 from debian-12-cloud"));
    }
}
