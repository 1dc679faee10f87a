//! The `terraform` WIT adapter: every call goes through [`CapCtx::guard`]
//! (the grant's module root and the module name, then the work, then the
//! journal) and runs on the environment's [`Terraform`]. terraform's lines go
//! to the run journal as they come (and to the terminal with `-v`), as `debug`
//! events of the caller with the module and subcommand. A command's limit is
//! `[terraform] timeout_s`, and in a plugin call at most the call's time left
//! less the interrupt grace, so terraform is interrupted (and can save its
//! state) before the call is cut off. An `apply` drops the VM listings and
//! configs the run holds (`proxmox::held`): terraform changed the cluster.
//!
//! It also holds the (empty) host side of the `types` interface, whose
//! records and error type the other interfaces `use`.

use std::sync::Arc;
use std::time::Duration;

use super::approval::ApplyRule;
use super::module_check::{self, ModuleVm, TemplateRef};
use super::module_dir::ModuleDir;
use super::scope::TerraformCall;
use super::{Flavour, Terraform};
use crate::caps::Call;
use crate::caps::budget::TimeoutArg;
use crate::caps::context::CapCtx;
use crate::caps::policy;
use crate::caps::proxmox::scope::ProxmoxCall;
use crate::contract::bindings::cradle::host::proxmox::{Host as _, VmResource};
use crate::contract::bindings::cradle::host::terraform::{self, ModuleFile, SavedPlan, TerraformInfo};
use crate::contract::bindings::cradle::host::types::Entry;
use crate::contract::bindings::cradle::host::types::Error as WitError;
use crate::contract::{CapError, ErrorKind};
use crate::journal::LogLevel;

/// The cluster's VMs as read for a module check, or why they could not be.
type Vms = Result<Vec<VmResource>, CapError>;

/// Time kept back from a plugin call's limit for terraform to stop after SIGINT.
const STOP_GRACE: Duration = Duration::from_secs(30);

impl CapCtx {
    fn terraform(&self) -> Result<Arc<Terraform>, CapError> {
        self.services
            .terraform
            .clone()
            .ok_or_else(|| CapError::failed("terraform: this environment has no cluster terraform could talk to"))
    }

    /// The module's directory under the grant's root (the guard has checked the name).
    fn module_dir(&self, module: &str) -> Result<ModuleDir, CapError> {
        let grant = self
            .grants
            .terraform
            .as_ref()
            .ok_or_else(|| CapError::failed(format!("terraform: {}.terraform is not granted", self.origin)))?;
        Ok(ModuleDir::new(&grant.module_root, module))
    }

    fn terraform_limit(&self, tf: &Terraform) -> Duration {
        let asked = u64::try_from(tf.timeout().as_millis()).unwrap_or(u64::MAX);
        let limit = self.clamp_timeout(asked, TimeoutArg::Terraform);
        if limit < tf.timeout() && limit > 2 * STOP_GRACE { limit - STOP_GRACE } else { limit }
    }

    /// What every module call needs: the provider, the directory, the limit.
    fn module_call(&self, module: &str) -> Result<(Arc<Terraform>, ModuleDir, Duration), CapError> {
        let tf = self.terraform()?;
        let m = self.module_dir(module)?;
        let limit = self.terraform_limit(&tf);
        Ok((tf, m, limit))
    }

    /// The cluster's VMs, to name the template a module clones for the
    /// proxmox grant (through the proxmox capability's own guard and reads).
    fn cluster_vms(&mut self) -> Result<Vec<VmResource>, CapError> {
        self.list_vms().map_err(CapError::from_wit)
    }

    /// The module's files (`files`) pass the content check, and the VM they
    /// create is inside the caller's proxmox grant: the same policy check a
    /// `clone-vm` of that VMID, node, storage and template goes through.
    fn check_module(&self, module: &str, files: &[(String, String)], vms: &Vms) -> Result<ModuleVm, CapError> {
        let tf = self.terraform()?;
        let denied = |message: String| CapError::new(ErrorKind::Denied, message);
        let vm = module_check::check(tf.flavour(), files).map_err(|r| denied(r.to_string()))?;
        let vms = vms.as_ref().map_err(Clone::clone)?;
        let template = match &vm.template {
            TemplateRef::Name(name) => {
                let vmid = vms.iter().find(|v| v.template && v.name.as_deref() == Some(name)).map_or(0, |v| v.vmid);
                (vmid, Some(name.as_str()))
            }
            TemplateRef::Vmid(vmid) => (*vmid, vms.iter().find(|v| v.vmid == *vmid).and_then(|v| v.name.as_deref())),
        };
        let storages: Vec<Option<&str>> =
            if vm.storages.is_empty() { vec![None] } else { vm.storages.iter().map(|s| Some(s.as_str())).collect() };
        for storage in storages {
            let call = Call::Proxmox(ProxmoxCall {
                node: Some(&vm.node),
                vmid: Some(vm.vmid),
                storage,
                template: Some(template),
                ..Default::default()
            });
            policy::check(&self.grants, &self.origin, &self.scope, &call).map_err(|d| {
                denied(format!(
                    "terraform: module `{module}` creates VM {} on {}, outside the proxmox grant ({d}); nothing was written or run",
                    vm.vmid, vm.node
                ))
            })?;
        }
        // The snippets the VM boots with: their storages granted and each one this
        // VM's own, the check the direct backend's `set-config` of `cicustom` gets.
        if let Some(cicustom) = &vm.cicustom {
            let entries = [Entry { key: "cicustom".into(), value: cicustom.clone() }];
            let touched = crate::caps::proxmox::config_scope::describe(&entries, &[], None);
            let call = Call::Proxmox(ProxmoxCall {
                node: Some(&vm.node),
                vmid: Some(vm.vmid),
                config: Some(&touched),
                ..Default::default()
            });
            policy::check(&self.grants, &self.origin, &self.scope, &call).map_err(|d| {
                denied(format!(
                    "terraform: module `{module}` gives VM {} the snippets `{cicustom}`, outside the proxmox grant ({d}); \
                     nothing was written or run",
                    vm.vmid
                ))
            })?;
        }
        Ok(vm)
    }

    /// The module as it is on disk (which must hold one) passes [`CapCtx::check_module`] before a
    /// terraform command reads it (`vms`: [`CapCtx::cluster_vms`]).
    fn check_module_on_disk(&self, module: &str, vms: &Vms) -> Result<ModuleVm, CapError> {
        let files = self.module_dir(module)?.config_files()?;
        self.check_module(module, &files, vms)
    }

    /// The cluster's VMs for the check, read before the call's guard (a read
    /// that fails is the check's error, inside the guard).
    fn vms_for_check(&mut self) -> Vms {
        self.cluster_vms()
    }

    /// The plugin's `terraform.destructive` grant.
    fn terraform_destructive(&self) -> bool {
        self.grants.terraform.as_ref().is_some_and(|g| g.destructive)
    }

    /// `apply`'s rule for a module creating VM `vmid`: the grant's
    /// `destructive`, and the inventory's replacement flag of the run's VM of
    /// that VMID (the call's binding, from the run's scope: never from the plugin).
    fn apply_rule(&self, flavour: Flavour, vmid: u32) -> ApplyRule {
        let rule = ApplyRule::for_flavour(flavour, self.terraform_destructive());
        match self.scope.vms.iter().find(|v| v.vmid == vmid) {
            Some(vm) => rule.for_vm(&vm.name, vm.allow_replacement),
            None => rule,
        }
    }

    /// terraform's line `line` of `function` on `module`, into the journal at
    /// `debug` (the terminal shows it with `-v`); blank lines are dropped.
    fn terraform_line(&self, function: &str, module: &str, line: &str) {
        if line.trim().is_empty() {
            return;
        }
        self.log_event(
            LogLevel::Debug,
            &format!("terraform {function}: {line}"),
            vec![("module".into(), module.to_string())],
        );
    }
}

fn call(module: &str) -> Call<'_> {
    Call::Terraform(TerraformCall { module: Some(module), destroy: false })
}

impl terraform::Host for CapCtx {
    fn info(&mut self) -> Result<TerraformInfo, WitError> {
        self.guard("info", Call::Terraform(TerraformCall { module: None, destroy: false }), || {
            let tf = self.terraform()?;
            let (flavour, version) = self.block_on(tf.settings())?;
            let flavour = match flavour {
                Flavour::Telmate => terraform::Flavour::Telmate,
                Flavour::Bpg => terraform::Flavour::Bpg,
            };
            Ok(TerraformInfo { flavour, version })
        })
        .map_err(Into::into)
    }

    fn write_module(&mut self, module: String, files: Vec<ModuleFile>) -> Result<(), WitError> {
        let vms = self.vms_for_check();
        self.guard("write-module", call(&module), || {
            let m = self.module_dir(&module)?;
            let files: Vec<(String, String)> = files.into_iter().map(|f| (f.name, f.content)).collect();
            super::module_dir::check_names(&files)?;
            self.check_module(&module, &files, &vms)?;
            m.write(&files)
        })
        .map_err(Into::into)
    }

    fn init(&mut self, module: String) -> Result<String, WitError> {
        let vms = self.vms_for_check();
        self.guard("init", call(&module), || {
            self.check_module_on_disk(&module, &vms)?;
            let (tf, m, limit) = self.module_call(&module)?;
            let sink = |l: &str| self.terraform_line("init", &module, l);
            // terraform's own lines went to the journal; the plugin gets only the outcome.
            self.block_on(tf.init(&m, limit, &sink)).map(|_| format!("module `{module}` initialised"))
        })
        .map_err(Into::into)
    }

    fn plan(&mut self, module: String, destroy: bool) -> Result<SavedPlan, WitError> {
        let vms = self.vms_for_check();
        self.guard("plan", Call::Terraform(TerraformCall { module: Some(&module), destroy }), || {
            self.check_module_on_disk(&module, &vms)?;
            let (tf, m, limit) = self.module_call(&module)?;
            let sink = |l: &str| self.terraform_line("plan", &module, l);
            let (plan_id, has_changes) =
                self.block_on(tf.plan(&m, &self.run.terraform_plans, destroy, limit, &sink))?;
            Ok(SavedPlan { plan_id, has_changes })
        })
        .map_err(Into::into)
    }

    fn show_plan(&mut self, module: String, plan_id: String) -> Result<String, WitError> {
        let vms = self.vms_for_check();
        self.guard("show-plan", call(&module), || {
            self.check_module_on_disk(&module, &vms)?;
            let (tf, m, limit) = self.module_call(&module)?;
            self.block_on(tf.show_plan(&m, &self.run.terraform_plans, &plan_id, limit))
        })
        .map_err(Into::into)
    }

    fn apply(&mut self, module: String, plan_id: String) -> Result<String, WitError> {
        let vms = self.vms_for_check();
        self.guard("apply", call(&module), || {
            let vm = self.check_module_on_disk(&module, &vms)?;
            let (tf, m, limit) = self.module_call(&module)?;
            let sink = |l: &str| self.terraform_line("apply", &module, l);
            let rule = self.apply_rule(tf.flavour(), vm.vmid);
            let plans = &self.run.terraform_plans;
            // The plugin gets what the host approved (the changes), never terraform's raw lines.
            let applied = self
                .block_on(tf.apply(&m, plans, &plan_id, &rule, &self.origin, limit, &sink))
                .map(|approval| approval.summary.join("\n"));
            // terraform changed the cluster behind the proxmox capability's
            // back (whether or not it succeeded): what the run holds is stale.
            self.run.held_reads.forget_changeable();
            applied
        })
        .map_err(Into::into)
    }

    fn discard_plan(&mut self, module: String, plan_id: String) -> Result<(), WitError> {
        self.guard("discard-plan", call(&module), || {
            let m = self.module_dir(&module)?;
            self.run.terraform_plans.discard(m.existing()?, &plan_id)
        })
        .map_err(Into::into)
    }

    fn keep_plan(&mut self, module: String, plan_id: String) -> Result<String, WitError> {
        self.guard("keep-plan", call(&module), || {
            let (tf, m, _) = self.module_call(&module)?;
            self.run.terraform_plans.keep(m.existing()?, &plan_id, tf.kept_max_age())
        })
        .map_err(Into::into)
    }

    fn adopt_plan(&mut self, module: String, kept_id: String) -> Result<String, WitError> {
        self.guard("adopt-plan", call(&module), || {
            let m = self.module_dir(&module)?;
            self.run.terraform_plans.adopt(m.existing()?, &kept_id)
        })
        .map_err(Into::into)
    }

    fn show_state(&mut self, module: String) -> Result<Option<String>, WitError> {
        let vms = self.vms_for_check();
        self.guard("show-state", call(&module), || {
            // A module with configuration is checked like any other command's;
            // a state alone evaluates nothing.
            let files = self.module_dir(&module)?.config_files()?;
            if !files.is_empty() {
                self.check_module(&module, &files, &vms)?;
            }
            let (tf, m, limit) = self.module_call(&module)?;
            self.block_on(tf.show_state(&m, limit))
        })
        .map_err(Into::into)
    }
}

impl crate::contract::bindings::cradle::host::types::Host for CapCtx {}
