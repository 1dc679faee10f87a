//! The WIT adapter of `cradle:host/dhcp`: every call goes through
//! [`CapCtx::guard`] (the `dhcp` grant's networks, then the work, then the
//! journal) and runs on the environment's provider, its timeout clamped to
//! the plugin call's time left. An environment without `dhcp = "NAME"` has
//! no provider: a call that passes its check then fails with `failed` saying
//! what to configure, never with a made-up result.

use std::sync::Arc;

use super::Unifi;
use super::scope::DhcpCall;
use crate::caps::Call;
use crate::caps::budget::TimeoutArg;
use crate::caps::context::CapCtx;
use crate::contract::CapError;
use crate::contract::bindings::cradle::host::dhcp::{Host, Reservation};
use crate::contract::bindings::cradle::host::types::Error as WitError;

impl CapCtx {
    fn dhcp_provider(&self) -> Result<(Arc<Unifi>, std::time::Duration), CapError> {
        let provider = self.services.dhcp.clone().ok_or_else(|| {
            CapError::failed(
                "dhcp: this environment has no DHCP provider; set dhcp = \"NAME\" in its [environments.ENV] section and define [dhcp.NAME] in cradle.toml",
            )
        })?;
        let limit = TimeoutArg::Http.max().as_millis() as u64;
        Ok((provider, self.clamp_timeout(limit, TimeoutArg::Http)))
    }
}

impl Host for CapCtx {
    fn reserve(&mut self, network: String, mac: String, ip: String, name: String) -> Result<Reservation, WitError> {
        self.guard("reserve", Call::Dhcp(DhcpCall { network: &network, ip: Some(&ip) }), || {
            let (provider, timeout) = self.dhcp_provider()?;
            self.block_on(provider.reserve(&network, &mac, &ip, &name, timeout))
        })
        .map_err(Into::into)
    }

    fn release(&mut self, network: String, mac: String) -> Result<bool, WitError> {
        self.guard("release", Call::Dhcp(DhcpCall { network: &network, ip: None }), || {
            let (provider, timeout) = self.dhcp_provider()?;
            self.block_on(provider.release(&network, &mac, timeout))
        })
        .map_err(Into::into)
    }

    fn lookup(&mut self, network: String, mac: String) -> Result<Option<Reservation>, WitError> {
        self.guard("lookup", Call::Dhcp(DhcpCall { network: &network, ip: None }), || {
            let (provider, timeout) = self.dhcp_provider()?;
            self.block_on(provider.lookup(&network, &mac, timeout))
        })
        .map_err(Into::into)
    }
}
