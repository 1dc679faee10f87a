//! `[dhcp.NAME]` in `cradle.toml`: one DHCP provider an environment names
//! with `dhcp = "NAME"`.
//!
//! Contract: the provider reaches its controller through a named endpoint of
//! `[endpoints]` (its URL, `ca_file` and credentials: `auth = "api-key"` or
//! `"unifi-login"` with `username`), which the loader checks exists; the
//! credentials stay the host's (a [`crate::secrets::SecretRef`] resolved at
//! the first call) and never reach a plugin or script. `site` is the UniFi
//! site the reservations live in.

use serde::Deserialize;

/// `[dhcp.NAME]`: a DHCP server whose reservations cradle keeps.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DhcpProviderConfig {
    /// The provider: `unifi` (UniFi Network, classic controller or UniFi OS).
    pub kind: DhcpProviderKind,
    /// The endpoint (a key of `[endpoints]`) with the controller's URL and
    /// credentials: `https://console/proxy/network` on UniFi OS,
    /// `https://controller:8443` on a classic controller.
    pub endpoint: String,
    /// The UniFi site (default `default`).
    #[serde(default = "default_site")]
    pub site: String,
}

/// The DHCP providers cradle speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DhcpProviderKind {
    /// UniFi Network's fixed IPs (`rest/user` clients with `use_fixedip`).
    Unifi,
}

fn default_site() -> String {
    "default".into()
}

impl DhcpProviderConfig {
    /// Check what needs neither the network nor the secret; the message names
    /// the key (relative to `[dhcp.NAME]`).
    pub fn validate(&self) -> Result<(), String> {
        if self.endpoint.trim().is_empty() {
            return Err("endpoint is empty; name the [endpoints.NAME] of the UniFi controller".into());
        }
        let site_ok =
            !self.site.is_empty() && self.site.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !site_ok {
            return Err(format!("site = \"{}\" is not a UniFi site name (e.g. \"default\")", self.site));
        }
        Ok(())
    }
}
