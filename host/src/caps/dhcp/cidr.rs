//! IPv4 subnets in CIDR form, the one place the `dhcp` capability does its
//! address math (it was Rhai in `workflows/lib/unifi.rhai`, tested only end
//! to end).
//!
//! Contract: [`Subnet::parse`] takes `a.b.c.d/n` with `n` in 0..=32 and keeps
//! the network (host bits cleared), so UniFi's `ip_subnet` (the gateway and
//! the prefix, `10.0.10.1/24`) and an operator's `10.0.10.0/24` are the same
//! subnet; anything else (a missing or out-of-range prefix, an IPv6 or
//! malformed address, spaces) is a [`SubnetError`] naming the text.

use std::fmt;
use std::net::Ipv4Addr;

/// An IPv4 subnet: its network address and prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subnet {
    network: Ipv4Addr,
    prefix: u8,
}

/// A text that is not an IPv4 subnet in CIDR form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an IPv4 subnet in CIDR form (e.g. 10.0.10.0/24)")]
pub struct SubnetError(pub String);

impl Subnet {
    /// Parse `a.b.c.d/n`; host bits are cleared.
    pub fn parse(text: &str) -> Result<Subnet, SubnetError> {
        let bad = || SubnetError(text.to_string());
        let (addr, prefix) = text.split_once('/').ok_or_else(bad)?;
        let addr: Ipv4Addr = addr.parse().map_err(|_| bad())?;
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        if prefix > 32 {
            return Err(bad());
        }
        Ok(Subnet { network: Ipv4Addr::from(u32::from(addr) & mask(prefix)), prefix })
    }

    /// Whether `ip` is inside this subnet.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & mask(self.prefix) == u32::from(self.network)
    }

    /// Whether every address of `other` is inside this subnet.
    pub fn covers(&self, other: &Subnet) -> bool {
        other.prefix >= self.prefix && self.contains(other.network)
    }
}

impl fmt::Display for Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// The netmask of a prefix length (0..=32) as a number.
fn mask(prefix: u8) -> u32 {
    if prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(prefix)) }
}

/// Parse an IPv4 address of a call, or say which argument it is not.
pub fn parse_ip(what: &str, text: &str) -> Result<Ipv4Addr, String> {
    text.parse().map_err(|_| format!("{what} `{text}` is not an IPv4 address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> Ipv4Addr {
        text.parse().expect("ip")
    }

    #[test]
    fn a_gateway_subnet_is_the_same_subnet_as_its_network() {
        let gateway = Subnet::parse("10.0.10.1/24").expect("gateway form");
        assert_eq!(gateway, Subnet::parse("10.0.10.0/24").expect("network form"));
        assert_eq!(gateway.to_string(), "10.0.10.0/24");
    }

    #[test]
    fn contains_holds_exactly_the_addresses_of_the_prefix() {
        let s = Subnet::parse("127.77.0.1/24").expect("subnet");
        assert!(s.contains(ip("127.77.0.0")) && s.contains(ip("127.77.0.255")));
        assert!(!s.contains(ip("127.77.1.0")) && !s.contains(ip("127.76.255.255")));
        let narrow = Subnet::parse("10.0.10.4/30").expect("subnet");
        assert!(narrow.contains(ip("10.0.10.7")) && !narrow.contains(ip("10.0.10.8")));
        assert!(Subnet::parse("0.0.0.0/0").expect("all").contains(ip("203.0.113.9")));
        let host = Subnet::parse("10.0.10.5/32").expect("host");
        assert!(host.contains(ip("10.0.10.5")) && !host.contains(ip("10.0.10.6")));
    }

    #[test]
    fn covers_is_containment_of_whole_subnets() {
        let wide = Subnet::parse("10.0.0.0/16").expect("wide");
        let lan = Subnet::parse("10.0.10.0/24").expect("lan");
        assert!(wide.covers(&lan) && lan.covers(&lan));
        assert!(!lan.covers(&wide));
        assert!(!lan.covers(&Subnet::parse("10.0.11.0/24").expect("other")));
    }

    #[test]
    fn malformed_subnets_are_refused_naming_the_text() {
        for text in
            ["10.0.10.0", "10.0.10.0/33", "10.0.10/24", "10.0.10.0/", "10.0.10.0/+8", "fd00::/64", " 10.0.10.0/24", ""]
        {
            assert_eq!(Subnet::parse(text), Err(SubnetError(text.to_string())), "{text}");
        }
        assert!(parse_ip("ip", "10.0.10.300").expect_err("bad").contains("ip `10.0.10.300`"));
    }
}
