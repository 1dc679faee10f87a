//! The WIT adapter of `cradle:host/post`: every call goes through
//! [`CapCtx::guard`] (the `post` grant's projects and templates, then the
//! work, then the journal) and runs on the environment's provider, its
//! timeout clamped to the plugin call's time left. An environment without
//! `post = "NAME"` has no provider: a call that passes its check then fails
//! with `failed` saying what to configure, never with a made-up result.

use std::sync::Arc;

use super::Semaphore;
use super::scope::PostCall;
use crate::caps::Call;
use crate::caps::budget::TimeoutArg;
use crate::caps::context::CapCtx;
use crate::contract::CapError;
use crate::contract::bindings::cradle::host::post::{Host, TaskOutcome, TemplateRef};
use crate::contract::bindings::cradle::host::types::Error as WitError;

impl CapCtx {
    fn post_provider(&self) -> Result<Arc<Semaphore>, CapError> {
        self.services.post.clone().ok_or_else(|| {
            CapError::failed(
                "post: this environment has no post-provision task provider; set post = \"NAME\" in its [environments.ENV] section and define [post.NAME] (kind = \"semaphore\") in cradle.toml",
            )
        })
    }
}

impl Host for CapCtx {
    fn run(&mut self, template: TemplateRef, extra_vars: String, timeout_ms: u64) -> Result<TaskOutcome, WitError> {
        let call = Call::Post(PostCall { project: template.project, template: template.template });
        self.guard("run", call, || {
            let vars: serde_json::Value = serde_json::from_str(&extra_vars)
                .map_err(|e| CapError::invalid(format!("post.run: extra-vars is not JSON: {e}")))?;
            let provider = self.post_provider()?;
            let limit = self.clamp_timeout(timeout_ms, TimeoutArg::PostTask);
            self.block_on(provider.run(&template, &vars, limit))
        })
        .map_err(Into::into)
    }
}
