//! The `dhcp` capability's scope: its grant section (`[...grants.dhcp]`:
//! [`DhcpGrant`], the subnets a caller may reserve in), what of a call the
//! grant looks at ([`DhcpCall`]: the network and the address), and the rule
//! comparing them:
//!
//! - a named network (a subnet in CIDR form) must lie inside a granted one;
//! - an address must be an IPv4 address inside the named network, if one is
//!   named, and inside a granted network;
//! - a call with neither (a release or lookup naming no network) is refused:
//!   it could reach a reservation in any network.
//!
//! Checked through [`crate::caps::policy::check`] like every call, before the
//! provider is asked; the provider checks the address against the network's
//! real subnet again.

use serde::Deserialize;

use super::cidr::{Subnet, parse_ip};
use crate::caps::policy::{Caller, Grant, GrantError, OutOfScope};

/// `[...grants.dhcp]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DhcpGrant {
    /// The subnets reservations may be made in, in CIDR form (`10.0.10.0/24`).
    #[serde(default)]
    pub networks: Vec<String>,
}

/// The scope-relevant arguments of a DHCP call.
#[derive(Debug, Clone, Copy)]
pub struct DhcpCall<'a> {
    /// The network's subnet in CIDR form, or empty: the network holding `ip`.
    pub network: &'a str,
    /// The address to reserve (`reserve` only).
    pub ip: Option<&'a str>,
}

impl Grant for DhcpGrant {
    type Call<'a> = DhcpCall<'a>;

    fn validate(&self) -> Result<(), GrantError> {
        for net in &self.networks {
            Subnet::parse(net).map_err(|e| GrantError {
                key: "dhcp.networks",
                value: net.clone(),
                problem: format!("is not a subnet: {e}"),
            })?;
        }
        Ok(())
    }

    fn check(&self, caller: &Caller<'_>, call: &DhcpCall<'_>) -> Result<(), OutOfScope> {
        let origin = caller.origin;
        let granted: Vec<Subnet> = self.networks.iter().filter_map(|n| Subnet::parse(n).ok()).collect();
        // "(none granted)" rather than "()" for the built-in defaults, which list no network.
        let listed = || if self.networks.is_empty() { "none granted".to_string() } else { self.networks.join(", ") };
        let network = if call.network.is_empty() {
            None
        } else {
            let net = Subnet::parse(call.network).map_err(|e| OutOfScope(format!("network: {e}")))?;
            if !granted.iter().any(|g| g.covers(&net)) {
                return Err(
                    format!("network `{}` is not inside {origin}.dhcp.networks ({})", call.network, listed()).into()
                );
            }
            Some(net)
        };
        let Some(ip) = call.ip else {
            return match network {
                Some(_) => Ok(()),
                None => Err("name the network (its subnet in CIDR form): a call without one could reach any network"
                    .to_string()
                    .into()),
            };
        };
        let addr = parse_ip("ip", ip).map_err(OutOfScope)?;
        if let Some(net) = network
            && !net.contains(addr)
        {
            return Err(format!("ip `{ip}` is outside network `{}` ({net})", call.network).into());
        }
        if !granted.iter().any(|g| g.contains(addr)) {
            return Err(format!("ip `{ip}` is not inside {origin}.dhcp.networks ({})", listed()).into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::Call;
    use crate::caps::policy::fixture::{allowed, denied};

    fn reserve<'a>(network: &'a str, ip: &'a str) -> Call<'a> {
        Call::Dhcp(DhcpCall { network, ip: Some(ip) })
    }

    #[test]
    fn a_network_outside_the_granted_subnets_is_denied() {
        let msg = denied(reserve("10.0.20.0/24", "10.0.20.5"));
        assert!(msg.contains("network `10.0.20.0/24` is not inside plugins.direct.grants.dhcp.networks"), "{msg}");
        // A wider network than the grant is not inside it either.
        assert!(denied(reserve("10.0.0.0/16", "10.0.10.5")).contains("is not inside"));
        assert!(denied(Call::Dhcp(DhcpCall { network: "10.0.20.0/24", ip: None })).contains("is not inside"));
        allowed(reserve("10.0.10.0/24", "10.0.10.5"));
        allowed(reserve("10.0.10.1/24", "10.0.10.5"));
        allowed(Call::Dhcp(DhcpCall { network: "10.0.10.0/24", ip: None }));
    }

    #[test]
    fn a_grant_listing_no_network_says_none_granted_not_an_empty_list() {
        let mut grants = crate::caps::policy::fixture::grants();
        grants.dhcp = Some(DhcpGrant { networks: vec![] });
        let scope = crate::caps::policy::fixture::scope();
        let msg = crate::caps::policy::check(&grants, "plugins.netbox.grants", &scope, &reserve("", "10.0.10.5"))
            .expect_err("no network granted")
            .to_string();
        assert!(msg.contains("plugins.netbox.grants.dhcp.networks (none granted)"), "{msg}");
    }

    #[test]
    fn an_ip_outside_the_named_network_is_denied() {
        let msg = denied(reserve("10.0.10.0/24", "10.0.11.5"));
        assert!(msg.contains("ip `10.0.11.5` is outside network `10.0.10.0/24`"), "{msg}");
    }

    #[test]
    fn an_ip_outside_the_granted_subnets_is_denied_when_no_network_is_named() {
        let msg = denied(reserve("", "192.0.2.7"));
        assert!(msg.contains("ip `192.0.2.7` is not inside plugins.direct.grants.dhcp.networks"), "{msg}");
        allowed(reserve("", "10.0.10.200"));
    }

    #[test]
    fn malformed_networks_and_addresses_and_unnamed_releases_are_denied() {
        assert!(denied(reserve("lan", "10.0.10.5")).contains("`lan` is not an IPv4 subnet"));
        assert!(denied(reserve("10.0.10.0/24", "10.0.10.256")).contains("is not an IPv4 address"));
        assert!(denied(Call::Dhcp(DhcpCall { network: "", ip: None })).contains("name the network"));
    }

    #[test]
    fn dhcp_without_a_grant_section_is_denied_naming_the_section() {
        let grants: crate::caps::Grants = toml::from_str("[dns]\nzones = [\"lab.example.\"]\n").expect("grants");
        let scope = crate::caps::policy::fixture::scope();
        let denied =
            crate::caps::policy::check(&grants, "workflow.grants", &scope, &reserve("10.0.10.0/24", "10.0.10.5"))
                .expect_err("no dhcp grant");
        assert!(denied.to_string().contains("add [workflow.grants.dhcp]"), "{denied}");
    }

    #[test]
    fn a_grant_network_that_is_no_subnet_is_refused_when_read() {
        let grant = DhcpGrant { networks: vec!["10.0.10.0/24".into(), "lan".into()] };
        let e = grant.validate().expect_err("lan");
        assert_eq!((e.key, e.value.as_str()), ("dhcp.networks", "lan"));
    }
}
