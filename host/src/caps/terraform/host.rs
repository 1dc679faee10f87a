//! The `terraform` WIT adapter, without a provider yet: every call goes
//! through the guard (grants, scope, journal) like any other, so plugins can be
//! written, granted and denied against it today; a call that passes its scope
//! check fails with `failed` saying the provider is missing, never with a
//! made-up result.
//!
//! It also holds the (empty) host side of the `types` interface, whose
//! records and error type the other interfaces `use`.

use super::scope::TerraformCall;
use crate::caps::Call;
use crate::caps::context::CapCtx;
use crate::contract::CapError;
use crate::contract::bindings::cradle::host::terraform;
use crate::contract::bindings::cradle::host::types::{Entry, Error as WitError};

fn missing(cap: &str) -> CapError {
    CapError::failed(format!(
        "{cap}: this cradle build has no {cap} provider configured for the environment; the call was allowed but nothing was done"
    ))
}

impl CapCtx {
    fn unavailable<T>(&self, function: &str, call: Call<'_>, cap: &str) -> Result<T, WitError> {
        self.guard(function, call, || Err(missing(cap))).map_err(Into::into)
    }
}

impl terraform::Host for CapCtx {
    fn init(&mut self, module: String) -> Result<String, WitError> {
        self.unavailable("init", Call::Terraform(TerraformCall { module: &module }), "terraform")
    }
    fn plan(&mut self, module: String, _vars: Vec<Entry>) -> Result<terraform::SavedPlan, WitError> {
        self.unavailable("plan", Call::Terraform(TerraformCall { module: &module }), "terraform")
    }
    fn show_plan(&mut self, module: String, _plan_id: String) -> Result<String, WitError> {
        self.unavailable("show-plan", Call::Terraform(TerraformCall { module: &module }), "terraform")
    }
    fn apply(&mut self, module: String, _plan_id: String) -> Result<String, WitError> {
        self.unavailable("apply", Call::Terraform(TerraformCall { module: &module }), "terraform")
    }
    fn discard_plan(&mut self, module: String, _plan_id: String) -> Result<(), WitError> {
        self.unavailable("discard-plan", Call::Terraform(TerraformCall { module: &module }), "terraform")
    }
    fn state_list(&mut self, module: String) -> Result<Vec<String>, WitError> {
        self.unavailable("state-list", Call::Terraform(TerraformCall { module: &module }), "terraform")
    }
    fn show_state(&mut self, module: String) -> Result<String, WitError> {
        self.unavailable("show-state", Call::Terraform(TerraformCall { module: &module }), "terraform")
    }
}

impl crate::contract::bindings::cradle::host::types::Host for CapCtx {}
