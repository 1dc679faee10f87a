//! The WIT adapter of `cradle:host/dns`: every call goes through
//! [`CapCtx::guard`] (the `dns` grant's zones, then the work, then the
//! journal) and runs on the environment's provider. An environment without
//! `dns = "NAME"` has no provider: a call that passes its check then fails
//! with `failed` saying what to configure, never with a made-up result.

use std::sync::Arc;

use super::providers::DnsProviders;
use super::scope::DnsCall;
use crate::caps::Call;
use crate::caps::budget::TimeoutArg;
use crate::caps::context::CapCtx;
use crate::contract::CapError;
use crate::contract::bindings::cradle::host::dns::{DnsRecord, Host, RecordKind};
use crate::contract::bindings::cradle::host::types::Error as WitError;

impl CapCtx {
    /// The environment's providers and the HTTP timeout (Technitium's; RFC
    /// 2136 has its own per exchange), clamped to the call's time left.
    fn dns_provider(&self) -> Result<(Arc<DnsProviders>, std::time::Duration), CapError> {
        let providers = self.services.dns.clone().ok_or_else(|| {
            CapError::failed(
                "dns: this environment has no DNS provider; set dns = \"NAME\" in its [environments.ENV] section and define [dns.NAME] in cradle.toml",
            )
        })?;
        let limit = TimeoutArg::Http.max().as_millis() as u64;
        Ok((providers, self.clamp_timeout(limit, TimeoutArg::Http)))
    }
}

impl Host for CapCtx {
    fn upsert(&mut self, rec: DnsRecord) -> Result<bool, WitError> {
        self.guard("upsert", Call::Dns(DnsCall { zone: &rec.zone, name: &rec.name }), || {
            let (provider, timeout) = self.dns_provider()?;
            self.block_on(provider.upsert(&rec, timeout))
        })
        .map_err(Into::into)
    }

    fn delete(&mut self, zone: String, name: String, kind: RecordKind) -> Result<bool, WitError> {
        self.guard("delete", Call::Dns(DnsCall { zone: &zone, name: &name }), || {
            let (provider, timeout) = self.dns_provider()?;
            self.block_on(provider.delete(&zone, &name, kind, timeout))
        })
        .map_err(Into::into)
    }
}
