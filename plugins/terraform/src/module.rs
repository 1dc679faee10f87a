//! One host's module through the `terraform` capability: render and write it,
//! read its state for ownership, make and approve a saved plan.
//!
//! The module is named after the VM (`vm.name`, a canonical name the host has
//! validated), so each host has its own directory and state. Every saved plan
//! is checked by `cradle-terraform-logic` before anything applies it; a plan
//! that is not approved is discarded at once. Errors: ownership and approval
//! refusals are `conflict` (the world is not as the run needs it; the message
//! says what to review), everything else comes from the host as it is.

use cradle_terraform_logic::Flavour;
use cradle_terraform_logic::approve::{self, Approval, ApprovedAction, Expected, Mode};
use cradle_terraform_logic::ownership::{self, Owner, Ownership};
use cradle_terraform_logic::render::{self, DiskInput, NicInput, SnippetRefs, VmInput};

use cradle_guest::Error;
use cradle_guest::config::pve_tags;
use cradle_guest::proxmox::{VmResource, template_in};
use cradle_guest::terraform::{self, Flavour as WitFlavour, ModuleFile};
use cradle_guest::types::{Snippets, VmSpec};

/// The provider flavour the environment renders for.
pub fn flavour() -> Result<Flavour, Error> {
    Ok(match terraform::info()?.flavour {
        WitFlavour::Telmate => Flavour::Telmate,
        WitFlavour::Bpg => Flavour::Bpg,
    })
}

/// What the VM's resource is rendered from: the spec, the template as the
/// cluster lists it (`vms`), and the snippets once they are uploaded.
pub fn input(vm: &VmSpec, vms: &[VmResource], snippets: Option<&Snippets>) -> Result<VmInput, Error> {
    let template = template_in(vms, vm)?;
    Ok(VmInput {
        name: vm.name.clone(),
        vmid: vm.vmid,
        template: vm.template.clone(),
        template_vmid: template.vmid,
        template_node: template.node,
        storage: vm.storage.clone(),
        cores: vm.cores,
        memory_mib: vm.memory_mib,
        disk_gib: vm.disk_gib,
        disks: vm
            .disks
            .iter()
            .map(|d| DiskInput { slot: d.slot.clone(), storage: d.storage.clone(), size_gib: d.size_gib })
            .collect(),
        nics: vm
            .nics
            .iter()
            .map(|n| NicInput { slot: n.slot.clone(), bridge: n.bridge.clone(), vlan: n.vlan })
            .collect(),
        // In the form PVE stores them (lowercased, de-duplicated, sorted): the
        // provider reads back what PVE stored, and any other form would show
        // as an update in every later plan.
        tags: pve_tags(&vm.tags.join(";")),
        snippets: snippets.map(|s| SnippetRefs {
            user: s.user.clone(),
            network: s.network.clone(),
            meta: s.meta.clone(),
        }),
    })
}

/// Write the rendered module and initialise it.
pub fn write(vm: &VmSpec, flavour: Flavour, input: &VmInput) -> Result<(), Error> {
    write_file(vm, flavour, input)?;
    terraform::init(&vm.name)?;
    Ok(())
}

/// Write the rendered module (provisioning's: nothing lifted) without `init`.
pub fn write_file(vm: &VmSpec, flavour: Flavour, input: &VmInput) -> Result<(), Error> {
    let file = ModuleFile { name: render::MODULE_FILE.into(), content: render::render(flavour, input) };
    terraform::write_module(&vm.name, &[file])
}

/// Whether the VM (present or not, `vm_exists`) agrees with the module's
/// state. A state that needs the provider to be read is read after `init`.
pub fn ownership(vm: &VmSpec, flavour: Flavour, vm_exists: bool) -> Result<Ownership, Error> {
    let state = match terraform::show_state(&vm.name) {
        Ok(state) => state,
        // The providers of an existing state are not installed (a new plugin
        // cache, a module made elsewhere): install them and read it again.
        Err(Error::Failed(_)) => {
            terraform::init(&vm.name)?;
            terraform::show_state(&vm.name)?
        }
        Err(e) => return Err(e),
    };
    let owner = Owner::for_flavour(flavour, vm.name.clone(), vm.vmid);
    ownership::check(state.as_deref(), &owner, vm_exists).map_err(|e| Error::Conflict(e.to_string()))
}

/// A saved plan that passed approval.
pub struct Approved {
    /// The plan's id (discard it when done).
    pub id: String,
    /// What it does.
    pub approval: Approval,
    /// Whether terraform reported changes.
    pub has_changes: bool,
}

/// Plan the module as it is on disk (`-destroy` in [`Mode::Destroy`]) and
/// approve it; a refused plan is discarded and is a `conflict`.
pub fn plan(vm: &VmSpec, flavour: Flavour, mode: Mode, allow_replacement: bool) -> Result<Approved, Error> {
    let saved = terraform::plan(&vm.name, mode == Mode::Destroy)?;
    let checked = terraform::show_plan(&vm.name, &saved.plan_id).and_then(|json| {
        approve::check(&json, &Expected::for_flavour(flavour, mode, allow_replacement))
            .map_err(|e| Error::Conflict(e.to_string()))
    });
    match checked {
        Ok(approval) => Ok(Approved { id: saved.plan_id, approval, has_changes: saved.has_changes }),
        Err(e) => {
            // The refusal is the error worth reporting; the plan file is the host's to clean up.
            let _ = terraform::discard_plan(&vm.name, &saved.plan_id);
            Err(e)
        }
    }
}

/// Apply `plan` when it changes anything, then discard it.
pub fn apply(vm: &VmSpec, plan: &Approved) -> Result<(), Error> {
    let applied = if plan.has_changes && plan.approval.action != ApprovedAction::NoOp {
        terraform::apply(&vm.name, &plan.id).map(|_| ())
    } else {
        Ok(())
    };
    let discarded = terraform::discard_plan(&vm.name, &plan.id);
    applied.and(discarded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> VmResource {
        VmResource {
            vmid: 9000,
            name: Some("debian-12".into()),
            node: "pve1".into(),
            status: "stopped".into(),
            template: true,
            lock: None,
            hastate: None,
            tags: None,
        }
    }

    fn spec(tags: &[&str]) -> VmSpec {
        VmSpec {
            name: "test-0".into(),
            vmid: 150,
            node: "pve1".into(),
            template: "debian-12".into(),
            storage: "local-lvm".into(),
            cores: 2,
            memory_mib: 2048,
            disk_gib: None,
            disks: vec![],
            nics: vec![],
            startup_order: None,
            tags: tags.iter().map(|t| (*t).to_string()).collect(),
            environment: "test".into(),
            allow_replacement: false,
        }
    }

    /// PVE stores tags lowercased, de-duplicated and sorted (pve-guest-common
    /// 4a8f6cb, src/PVE/GuestHelpers.pm `get_unique_tags`); rendered any other
    /// way, the provider's refresh reads back something else and every plan
    /// after the first shows an update of `tags`.
    #[test]
    fn tags_are_rendered_as_pve_stores_them_so_a_later_plan_has_no_diff() {
        let input = input(&spec(&["web", "Cradle", "WEB", "env-test"]), &[template()], None).expect("input");
        assert_eq!(input.tags, ["cradle", "env-test", "web"]);
        let telmate = render::render(Flavour::Telmate, &input);
        assert!(telmate.contains("\"tags\": \"cradle;env-test;web\""), "telmate: one ;-separated string: {telmate}");
        let bpg: String = render::render(Flavour::Bpg, &input).split_whitespace().collect();
        assert!(bpg.contains("\"tags\":[\"cradle\",\"env-test\",\"web\"]"), "bpg: a list: {bpg}");
    }
}
