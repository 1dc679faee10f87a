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

use super::module_dir::ModuleDir;
use super::scope::TerraformCall;
use super::{Flavour, Terraform};
use crate::caps::Call;
use crate::caps::budget::TimeoutArg;
use crate::caps::context::CapCtx;
use crate::contract::CapError;
use crate::contract::bindings::cradle::host::terraform::{self, ModuleFile, SavedPlan, TerraformInfo};
use crate::contract::bindings::cradle::host::types::Error as WitError;
use crate::journal::LogLevel;

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
        self.guard("write-module", call(&module), || {
            let m = self.module_dir(&module)?;
            let files: Vec<(String, String)> = files.into_iter().map(|f| (f.name, f.content)).collect();
            m.write(&files)
        })
        .map_err(Into::into)
    }

    fn init(&mut self, module: String) -> Result<String, WitError> {
        self.guard("init", call(&module), || {
            let (tf, m, limit) = self.module_call(&module)?;
            let sink = |l: &str| self.terraform_line("init", &module, l);
            self.block_on(tf.init(&m, limit, &sink))
        })
        .map_err(Into::into)
    }

    fn plan(&mut self, module: String, destroy: bool) -> Result<SavedPlan, WitError> {
        self.guard("plan", Call::Terraform(TerraformCall { module: Some(&module), destroy }), || {
            let (tf, m, limit) = self.module_call(&module)?;
            let sink = |l: &str| self.terraform_line("plan", &module, l);
            let (plan_id, has_changes) =
                self.block_on(tf.plan(&m, &self.run.terraform_plans, destroy, limit, &sink))?;
            Ok(SavedPlan { plan_id, has_changes })
        })
        .map_err(Into::into)
    }

    fn show_plan(&mut self, module: String, plan_id: String) -> Result<String, WitError> {
        self.guard("show-plan", call(&module), || {
            let (tf, m, limit) = self.module_call(&module)?;
            self.block_on(tf.show_plan(&m, &self.run.terraform_plans, &plan_id, limit))
        })
        .map_err(Into::into)
    }

    fn apply(&mut self, module: String, plan_id: String) -> Result<String, WitError> {
        self.guard("apply", call(&module), || {
            let (tf, m, limit) = self.module_call(&module)?;
            let sink = |l: &str| self.terraform_line("apply", &module, l);
            let applied = self.block_on(tf.apply(&m, &self.run.terraform_plans, &plan_id, limit, &sink));
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

    fn show_state(&mut self, module: String) -> Result<Option<String>, WitError> {
        self.guard("show-state", call(&module), || {
            let (tf, m, limit) = self.module_call(&module)?;
            self.block_on(tf.show_state(&m, limit))
        })
        .map_err(Into::into)
    }
}

impl crate::contract::bindings::cradle::host::types::Host for CapCtx {}
