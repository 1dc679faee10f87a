//! The sample backend: plans a VM from its spec and reports through the `log`
//! capability, without touching any cluster. It exists to show the shape of a
//! backend plugin and to exercise the host (README main job, benchmarks); it
//! refuses to create or remove anything.

cradle_guest::export_backend!(Sample);

cradle_guest::manifest! {
    name: "sample",
    version: env!("CARGO_PKG_VERSION"),
    description: "Plans VMs from their spec and logs; creates nothing",
    needs: ["log"],
}

use cradle_guest::lifecycle::{PlanAction, PlanOutcome};
use cradle_guest::log::{self as hostlog, Level};
use cradle_guest::types::{Entry, Snippets, VmSpec, VmState};
use cradle_guest::{Backend, Error};

struct Sample;

fn entry(key: &str, value: impl ToString) -> Entry {
    Entry { key: key.to_string(), value: value.to_string() }
}

impl Backend for Sample {
    fn discover(vm: VmSpec) -> Result<Option<VmState>, Error> {
        hostlog::event(Level::Debug, "sample backend knows no VMs", &[entry("vm", &vm.name)]);
        Ok(None)
    }

    fn check_ownership(_vm: VmSpec, found: Option<VmState>) -> Result<(), Error> {
        match found {
            None => Ok(()),
            Some(state) => Err(Error::Conflict(format!(
                "VM {} (vmid {}) exists but the sample backend owns nothing",
                state.name, state.vmid
            ))),
        }
    }

    fn plan(vm: VmSpec) -> Result<PlanOutcome, Error> {
        if vm.name.is_empty() {
            return Err(Error::Invalid("vm.name is empty".into()));
        }
        let mut summary = vec![
            format!("create {} (vmid {}) on {} from template {}", vm.name, vm.vmid, vm.node, vm.template),
            format!("{} cores, {} MiB memory, storage {}", vm.cores, vm.memory_mib, vm.storage),
        ];
        if let Some(gib) = vm.disk_gib {
            summary.push(format!("boot disk {gib} GiB"));
        }
        for nic in &vm.nics {
            let vlan = nic.vlan.map(|t| format!(" vlan {t}")).unwrap_or_default();
            let addr = nic.address.clone().unwrap_or_else(|| "dhcp".into());
            summary.push(format!("{} on {}{} address {}", nic.slot, nic.bridge, vlan, addr));
        }
        hostlog::event(Level::Info, "planned", &[entry("vm", &vm.name), entry("changes", summary.len())]);
        Ok(PlanOutcome { action: PlanAction::Create, summary, plan_id: None })
    }

    fn create(vm: VmSpec, _snippets: Snippets) -> Result<VmState, Error> {
        Err(Error::Invalid(format!(
            "the sample backend only plans; choose the `direct` or `terraform` backend to create {}",
            vm.name
        )))
    }

    fn reconcile(_vm: VmSpec, _found: VmState) -> Result<Vec<String>, Error> {
        Ok(Vec::new())
    }

    fn remove(vm: VmSpec) -> Result<(), Error> {
        Err(Error::Invalid(format!("the sample backend only plans; it cannot remove {}", vm.name)))
    }
}
