//! Host adapters for capabilities whose providers are not part of this build
//! yet: `ssh`, `dns` and `terraform`. Their WIT interfaces, grants and scope
//! checks are complete, so plugins can be written, granted and denied against
//! them today; a call that passes its scope check fails with `failed` saying
//! the provider is missing, never with a made-up result.

use super::context::{CapCtx, CapError};
use super::policy::Call;
use crate::plugin::bindings::cradle::host::types::{Entry, Error as WitError};
use crate::plugin::bindings::cradle::host::{dns, ssh, terraform};

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

impl ssh::Host for CapCtx {
    fn exec(
        &mut self,
        target: ssh::Target,
        _command: String,
        _stdin: Option<Vec<u8>>,
        _timeout_ms: u64,
    ) -> Result<ssh::ExecOutput, WitError> {
        self.unavailable("exec", Call::Ssh { host: &target.host, upload: None }, "ssh")
    }
    fn upload(
        &mut self,
        target: ssh::Target,
        remote_path: String,
        _content: Vec<u8>,
        _mode: u32,
        _sudo: bool,
    ) -> Result<(), WitError> {
        self.unavailable("upload", Call::Ssh { host: &target.host, upload: Some(&remote_path) }, "ssh")
    }
    fn wait_for(&mut self, target: ssh::Target, _timeout_ms: u64) -> Result<(), WitError> {
        self.unavailable("wait-for", Call::Ssh { host: &target.host, upload: None }, "ssh")
    }
    fn trust_host_key(&mut self, host: String, _port: u16, _public_key: String) -> Result<(), WitError> {
        self.unavailable("trust-host-key", Call::Ssh { host: &host, upload: None }, "ssh")
    }
    fn forget_host_key(&mut self, host: String, _port: u16) -> Result<(), WitError> {
        self.unavailable("forget-host-key", Call::Ssh { host: &host, upload: None }, "ssh")
    }
}

impl dns::Host for CapCtx {
    fn upsert(&mut self, rec: dns::DnsRecord) -> Result<bool, WitError> {
        self.unavailable("upsert", Call::Dns { zone: &rec.zone, name: &rec.name }, "dns")
    }
    fn delete(&mut self, zone: String, name: String, _kind: dns::RecordKind) -> Result<bool, WitError> {
        self.unavailable("delete", Call::Dns { zone: &zone, name: &name }, "dns")
    }
}

impl terraform::Host for CapCtx {
    fn init(&mut self, module: String) -> Result<String, WitError> {
        self.unavailable("init", Call::Terraform { module: &module }, "terraform")
    }
    fn plan(&mut self, module: String, _vars: Vec<Entry>) -> Result<terraform::SavedPlan, WitError> {
        self.unavailable("plan", Call::Terraform { module: &module }, "terraform")
    }
    fn show_plan(&mut self, module: String, _plan_id: String) -> Result<String, WitError> {
        self.unavailable("show-plan", Call::Terraform { module: &module }, "terraform")
    }
    fn apply(&mut self, module: String, _plan_id: String) -> Result<String, WitError> {
        self.unavailable("apply", Call::Terraform { module: &module }, "terraform")
    }
    fn discard_plan(&mut self, module: String, _plan_id: String) -> Result<(), WitError> {
        self.unavailable("discard-plan", Call::Terraform { module: &module }, "terraform")
    }
    fn state_list(&mut self, module: String) -> Result<Vec<String>, WitError> {
        self.unavailable("state-list", Call::Terraform { module: &module }, "terraform")
    }
    fn show_state(&mut self, module: String) -> Result<String, WitError> {
        self.unavailable("show-state", Call::Terraform { module: &module }, "terraform")
    }
}

impl crate::plugin::bindings::cradle::host::types::Host for CapCtx {}
