//! Is the guest's network what its network-data asked for? Checked on the guest
//! after cloud-init reported `done`, because `done` proves nothing about it: a
//! route cloud-init rendered as `post-up route add` fails silently on an image
//! without net-tools, `dns-nameservers` does nothing without resolvconf.
//!
//! Contract: [`COMMANDS`] are what a minimal Debian 12 has (iproute2's `ip -j`,
//! `cat`; `resolvectl` only when `/etc/resolv.conf` points at systemd-resolved's
//! stub 127.0.0.53). [`parse_links`] and [`parse_routes`] read the `ip -j` JSON
//! into typed values and fail on malformed JSON with
//! [`NetVerifyError::Unreadable`] naming the command, never a panic;
//! [`parse_resolv_conf`] and [`parse_resolvectl_dns`] keep the addresses they can
//! read and skip everything else. [`check`] compares them with the
//! VM's [`Interface`]s: every static address on its interface (with its prefix),
//! a default route via each gateway on that interface, every nameserver in effect.
//! The first NIC with a gateway of a family is the VM's primary one for that
//! family: its route must be the one in effect (the lowest metric, the earlier
//! listed on a tie, as the kernel picks), so a default route another interface
//! got (a DHCP lease on a second NIC, a leftover) cannot carry the traffic.
//! DHCP interfaces are not checked (their address is the DHCP server's to give).
//! A mismatch is [`NetVerifyError::Mismatch`], naming the VM, each missing piece
//! and the likely cause.

use std::fmt::Write as _;
use std::net::IpAddr;

use serde::Deserialize;

use super::Interface;

/// The stub address systemd-resolved puts in `/etc/resolv.conf`.
pub const RESOLVED_STUB: &str = "127.0.0.53";

/// The commands run on the guest, in order (the last two only when needed).
pub const COMMANDS: Commands = Commands {
    addresses: "ip -j addr show",
    routes4: "ip -j route show default",
    routes6: "ip -j -6 route show default",
    resolv_conf: "cat /etc/resolv.conf",
    resolvectl: "resolvectl dns",
};

/// See [`COMMANDS`].
#[derive(Debug, Clone, Copy)]
pub struct Commands {
    pub addresses: &'static str,
    pub routes4: &'static str,
    pub routes6: &'static str,
    pub resolv_conf: &'static str,
    pub resolvectl: &'static str,
}

/// Why the check could not pass.
#[derive(Debug, thiserror::Error)]
pub enum NetVerifyError {
    /// A command's output was not what it prints.
    #[error("{vm}: could not read the output of `{command}` on the guest: {problem}")]
    Unreadable { vm: String, command: &'static str, problem: String },
    /// The guest's network differs from its network-data.
    #[error("{vm}: the guest's network is not what its network-data asked for (cloud-init reported done): {}", .problems.join("; "))]
    Mismatch { vm: String, problems: Vec<String> },
}

/// One interface of `ip -j addr show`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Link {
    pub ifname: String,
    #[serde(default)]
    pub addr_info: Vec<AddrInfo>,
}

/// One address of a [`Link`].
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct AddrInfo {
    pub family: String,
    pub local: Option<IpAddr>,
    pub prefixlen: Option<u8>,
}

/// One route of `ip -j route show default`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Route {
    pub dst: String,
    pub gateway: Option<IpAddr>,
    pub dev: Option<String>,
    /// iproute2 omits it for metric 0.
    #[serde(default)]
    pub metric: Option<u32>,
    /// From `ip -6` (a route without a gateway does not say its family).
    #[serde(skip)]
    pub v6: bool,
}

impl Route {
    fn describe(&self) -> String {
        let mut s = format!("via {}", self.gateway.map(|g| g.to_string()).unwrap_or_default());
        if let Some(d) = &self.dev {
            let _ = write!(s, " dev {d}");
        }
        if let Some(m) = self.metric.filter(|m| *m > 0) {
            let _ = write!(s, " metric {m}");
        }
        s
    }
}

/// The default route of `gw`'s family the kernel uses: the lowest metric, the
/// first listed among equals.
fn route_in_effect(routes: &[Route], gw: IpAddr) -> Option<&Route> {
    routes.iter().filter(|r| r.dst == "default" && r.v6 == gw.is_ipv6()).min_by_key(|r| r.metric.unwrap_or(0))
}

/// Where the nameservers in effect were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolverSource {
    /// `/etc/resolv.conf` (glibc reads it directly).
    ResolvConf,
    /// `resolvectl dns` (systemd-resolved behind the stub).
    Resolved,
}

/// What the guest reports.
#[derive(Debug, Clone)]
pub struct Observed {
    pub links: Vec<Link>,
    pub routes: Vec<Route>,
    /// `None` when no nameserver was expected (not read).
    pub nameservers: Option<(ResolverSource, Vec<IpAddr>)>,
}

fn unreadable(vm: &str, command: &'static str, e: impl ToString) -> NetVerifyError {
    NetVerifyError::Unreadable { vm: vm.to_string(), command, problem: e.to_string() }
}

/// `ip -j addr show`.
pub fn parse_links(vm: &str, json: &str) -> Result<Vec<Link>, NetVerifyError> {
    serde_json::from_str(json).map_err(|e| unreadable(vm, COMMANDS.addresses, e))
}

/// `ip -j [-6] route show default` (empty output = no route; iproute2 prints `[]` or nothing).
pub fn parse_routes(vm: &str, command: &'static str, json: &str) -> Result<Vec<Route>, NetVerifyError> {
    if json.trim().is_empty() {
        return Ok(Vec::new());
    }
    let mut routes: Vec<Route> = serde_json::from_str(json).map_err(|e| unreadable(vm, command, e))?;
    let v6 = command == COMMANDS.routes6;
    for r in &mut routes {
        r.v6 = v6;
    }
    Ok(routes)
}

/// The `nameserver` lines of a resolv.conf (comments and other options ignored).
pub fn parse_resolv_conf(text: &str) -> Vec<IpAddr> {
    text.lines()
        .map(str::trim)
        .filter_map(|l| l.strip_prefix("nameserver"))
        .filter_map(|rest| rest.split_whitespace().next())
        // A scoped IPv6 address (`fe80::1%eth0`) keeps only the address.
        .filter_map(|a| a.split('%').next().and_then(|a| a.parse().ok()))
        .collect()
}

/// Whether resolv.conf sends every query to systemd-resolved's stub.
pub fn uses_resolved_stub(servers: &[IpAddr]) -> bool {
    !servers.is_empty() && servers.iter().all(|s| s.to_string() == RESOLVED_STUB)
}

/// `resolvectl dns`: `Global: a b` and `Link 2 (ens18): c d` lines; every server listed.
pub fn parse_resolvectl_dns(text: &str) -> Vec<IpAddr> {
    text.lines()
        .filter_map(|l| l.split_once("):").map(|(_, r)| r).or_else(|| l.strip_prefix("Global:")))
        .flat_map(str::split_whitespace)
        .filter_map(|a| a.split(['%', '#']).next().and_then(|a| a.parse().ok()))
        .collect()
}

/// The guest interface name of a NIC (`<name>.<vlan>` when the guest tags).
fn guest_ifname(nic: &Interface) -> String {
    match nic.vlan_in_guest {
        Some(id) => format!("{}.{id}", nic.name),
        None => nic.name.clone(),
    }
}

fn list<T: ToString>(items: impl IntoIterator<Item = T>) -> String {
    let v: Vec<String> = items.into_iter().map(|i| i.to_string()).collect();
    if v.is_empty() { "none".into() } else { v.join(", ") }
}

/// Whether any NIC expects nameservers (so resolv.conf must be read).
pub fn expects_nameservers(nics: &[Interface]) -> bool {
    nics.iter().any(|n| !n.nameservers.is_empty())
}

/// Whether any NIC has an IPv6 gateway (so the IPv6 routes must be read).
pub fn expects_ipv6_route(nics: &[Interface]) -> bool {
    nics.iter().any(|n| n.gateway.is_some_and(|g| g.is_ipv6()))
}

/// Compare what the guest reports with the VM's NICs; see the module docs.
pub fn check(vm: &str, nics: &[Interface], seen: &Observed) -> Result<(), NetVerifyError> {
    let mut problems = Vec::new();
    for (i, nic) in nics.iter().enumerate() {
        let ifname = guest_ifname(nic);
        let link = seen.links.iter().find(|l| l.ifname == ifname);
        if let Some(want) = nic.address {
            let has = link.is_some_and(|l| {
                l.addr_info.iter().any(|a| a.local == Some(want.addr()) && a.prefixlen == Some(want.prefix()))
            });
            if !has {
                let p = match link {
                    None => format!(
                        "the guest has no interface {ifname} (it has: {}); set guest_interface to the image's NIC name",
                        list(seen.links.iter().map(|l| l.ifname.as_str()))
                    ),
                    Some(l) => format!(
                        "{ifname} does not have the address {want} (it has: {}); cloud-init did not apply the network-data: check that the image does not disable cloud-init's network config (/etc/cloud/cloud.cfg.d/)",
                        list(l.addr_info.iter().filter_map(|a| Some(format!("{}/{}", a.local?, a.prefixlen?))))
                    ),
                };
                problems.push(p);
            }
        }
        if let Some(gw) = nic.gateway {
            let ours =
                |r: &Route| r.dst == "default" && r.gateway == Some(gw) && r.dev.as_deref() == Some(ifname.as_str());
            let ok = seen.routes.iter().any(ours);
            // The first NIC with a gateway of this family.
            let primary = !nics[..i].iter().any(|n| n.gateway.is_some_and(|g| g.is_ipv4() == gw.is_ipv4()));
            if ok
                && primary
                && let Some(effective) = route_in_effect(&seen.routes, gw).filter(|r| !ours(r))
            {
                problems.push(format!(
                    "the default route in effect is {}, not the one via {gw} on {ifname} (the VM's first gateway); \
                         another interface got a default route with a lower or equal metric (a DHCP lease, a leftover \
                         configuration): inspect `ip route show default` on the guest",
                    effective.describe()
                ));
            }
            if !ok {
                let found = list(
                    seen.routes
                        .iter()
                        .filter(|r| r.gateway.is_some_and(|g| g.is_ipv4() == gw.is_ipv4()))
                        .map(Route::describe),
                );
                problems.push(format!(
                    "the guest has no default route via {gw} on {ifname} (its default routes: {found}); the image may lack \
                     `route` (net-tools), which cloud-init's ifupdown renderer uses for `routes:` entries, or something \
                     else manages routes: inspect /etc/network/interfaces.d/50-cloud-init or /etc/netplan/ on the guest"
                ));
            }
        }
    }
    let wanted: Vec<IpAddr> = {
        let mut w: Vec<IpAddr> = Vec::new();
        for ns in nics.iter().flat_map(|n| n.nameservers.iter()) {
            if !w.contains(ns) {
                w.push(*ns);
            }
        }
        w
    };
    if !wanted.is_empty() {
        let (source, have) = match &seen.nameservers {
            Some((s, h)) => (*s, h.as_slice()),
            None => (ResolverSource::ResolvConf, &[][..]),
        };
        let missing: Vec<&IpAddr> = wanted.iter().filter(|w| !have.contains(w)).collect();
        if !missing.is_empty() {
            let (where_, hint) = match source {
                ResolverSource::ResolvConf => (
                    "/etc/resolv.conf",
                    "cradle writes /etc/resolv.conf through user-data write_files because ENI's dns-nameservers needs \
                     resolvconf: check that the image runs cloud-init's write_files module and that nothing (dhclient, \
                     a network manager) rewrites the file",
                ),
                ResolverSource::Resolved => (
                    "systemd-resolved (resolvectl dns)",
                    "the network-data nameservers did not reach systemd-resolved: inspect `resolvectl status` and the \
                     netplan/networkd configuration on the guest",
                ),
            };
            problems.push(format!(
                "the nameservers {} are not in effect ({where_} lists: {}); {hint}",
                list(missing),
                list(have)
            ));
        }
    }
    if problems.is_empty() { Ok(()) } else { Err(NetVerifyError::Mismatch { vm: vm.to_string(), problems }) }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Output of iproute2 6.1 (Debian 12) on a guest configured as test-0.
    const ADDR: &str = r#"[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP","LOWER_UP"],"mtu":65536,"qdisc":"noqueue","operstate":"UNKNOWN","group":"default","txqlen":1000,"link_type":"loopback","address":"00:00:00:00:00:00","broadcast":"00:00:00:00:00:00","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8,"scope":"host","label":"lo","valid_life_time":4294967295,"preferred_life_time":4294967295},{"family":"inet6","local":"::1","prefixlen":128,"scope":"host","valid_life_time":4294967295,"preferred_life_time":4294967295}]},{"ifindex":2,"ifname":"ens18","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1500,"qdisc":"pfifo_fast","operstate":"UP","group":"default","txqlen":1000,"link_type":"ether","address":"bc:24:11:aa:bb:cc","broadcast":"ff:ff:ff:ff:ff:ff","altnames":["enp0s18"],"addr_info":[{"family":"inet","local":"10.0.0.5","prefixlen":24,"broadcast":"10.0.0.255","scope":"global","label":"ens18","valid_life_time":4294967295,"preferred_life_time":4294967295}]}]"#;
    const ROUTE: &str = r#"[{"dst":"default","gateway":"10.0.0.1","dev":"ens18","flags":["onlink"]}]"#;

    fn nic() -> Interface {
        Interface {
            address: Some("10.0.0.5/24".parse().unwrap()),
            gateway: Some("10.0.0.1".parse().unwrap()),
            nameservers: vec!["10.0.0.53".parse().unwrap()],
            ..Interface::default()
        }
    }

    fn observed(routes: &str, resolv: &str) -> Observed {
        Observed {
            links: parse_links("test-0", ADDR).unwrap(),
            routes: parse_routes("test-0", COMMANDS.routes4, routes).unwrap(),
            nameservers: Some((ResolverSource::ResolvConf, parse_resolv_conf(resolv))),
        }
    }

    #[test]
    fn a_guest_configured_as_asked_passes() {
        check("test-0", &[nic()], &observed(ROUTE, "# x\nnameserver 10.0.0.53\nsearch lab\n")).unwrap();
    }

    #[test]
    fn a_missing_default_route_fails_naming_the_gateway_and_the_likely_cause() {
        let msg = check("test-0", &[nic()], &observed("[]", "nameserver 10.0.0.53\n")).unwrap_err().to_string();
        assert!(msg.starts_with("test-0: "), "{msg}");
        assert!(msg.contains("no default route via 10.0.0.1 on ens18 (its default routes: none)"), "{msg}");
        assert!(msg.contains("cloud-init reported done") && msg.contains("net-tools"), "{msg}");
        // A default route via another gateway is not the one asked for.
        let other = r#"[{"dst":"default","gateway":"10.0.0.254","dev":"ens18"}]"#;
        let msg = check("test-0", &[nic()], &observed(other, "nameserver 10.0.0.53\n")).unwrap_err().to_string();
        assert!(msg.contains("via 10.0.0.254 dev ens18"), "{msg}");
        assert!(parse_routes("test-0", COMMANDS.routes4, "").unwrap().is_empty());
    }

    #[test]
    fn the_first_gateways_route_must_be_the_one_in_effect() {
        // A second default route with a lower metric (a DHCP lease on ens19) wins.
        let lower = r#"[{"dst":"default","gateway":"10.0.0.1","dev":"ens18","metric":100},{"dst":"default","gateway":"192.168.1.1","dev":"ens19","metric":50}]"#;
        let msg = check("test-0", &[nic()], &observed(lower, "nameserver 10.0.0.53\n")).unwrap_err().to_string();
        assert!(
            msg.contains(
                "the default route in effect is via 192.168.1.1 dev ens19 metric 50, not the one via 10.0.0.1 on ens18"
            ),
            "{msg}"
        );
        // Equal metrics: the first listed is in effect.
        let first = r#"[{"dst":"default","gateway":"192.168.1.1","dev":"ens19"},{"dst":"default","gateway":"10.0.0.1","dev":"ens18"}]"#;
        assert!(check("test-0", &[nic()], &observed(first, "nameserver 10.0.0.53\n")).is_err());
        // Ours first, or with the lowest metric: in effect.
        let ours = r#"[{"dst":"default","gateway":"10.0.0.1","dev":"ens18"},{"dst":"default","gateway":"192.168.1.1","dev":"ens19","metric":200}]"#;
        check("test-0", &[nic()], &observed(ours, "nameserver 10.0.0.53\n")).unwrap();
        // A gateway-less IPv6 default route (from `ip -6`) is not an IPv4 route.
        let mut seen = observed(ROUTE, "nameserver 10.0.0.53\n");
        let v6 = r#"[{"dst":"default","dev":"wg0"}]"#;
        let mut routes = parse_routes("test-0", COMMANDS.routes6, v6).unwrap();
        routes.append(&mut seen.routes);
        seen.routes = routes;
        check("test-0", &[nic()], &seen).unwrap();
        let v4 = r#"[{"dst":"default","dev":"wg0","metric":0},{"dst":"default","gateway":"10.0.0.1","dev":"ens18","metric":5}]"#;
        assert!(
            check("test-0", &[nic()], &observed(v4, "nameserver 10.0.0.53\n")).is_err(),
            "an IPv4 device route wins"
        );
        // A second NIC's gateway needs its route, not the lowest metric.
        let mut second = nic();
        second.name = "ens19".into();
        second.address = None;
        second.nameservers = vec![];
        second.gateway = Some("192.168.1.1".parse().unwrap());
        check("test-0", &[nic(), second], &observed(ours, "nameserver 10.0.0.53\n")).unwrap();
    }

    #[test]
    fn a_wrong_address_or_prefix_or_interface_fails() {
        let mut n = nic();
        n.address = Some("10.0.0.5/23".parse().unwrap());
        n.gateway = None;
        let msg = check("test-0", &[n.clone()], &observed(ROUTE, "nameserver 10.0.0.53\n")).unwrap_err().to_string();
        assert!(msg.contains("ens18 does not have the address 10.0.0.5/23 (it has: 10.0.0.5/24)"), "{msg}");
        n.name = "eth0".into();
        let msg = check("test-0", &[n], &observed(ROUTE, "nameserver 10.0.0.53\n")).unwrap_err().to_string();
        assert!(msg.contains("no interface eth0 (it has: lo, ens18)"), "{msg}");
    }

    #[test]
    fn nameservers_not_in_effect_fail_and_the_resolved_stub_is_recognised() {
        let msg = check("test-0", &[nic()], &observed(ROUTE, "domain example\n")).unwrap_err().to_string();
        assert!(msg.contains("nameservers 10.0.0.53 are not in effect (/etc/resolv.conf lists: none)"), "{msg}");
        let stub = parse_resolv_conf("nameserver 127.0.0.53\noptions edns0 trust-ad\n");
        assert!(uses_resolved_stub(&stub));
        assert!(!uses_resolved_stub(&parse_resolv_conf("nameserver 10.0.0.53\n")));
        let dns = parse_resolvectl_dns("Global:\nLink 2 (ens18): 10.0.0.53 2001:db8::53\n");
        assert_eq!(dns, vec!["10.0.0.53".parse::<IpAddr>().unwrap(), "2001:db8::53".parse().unwrap()]);
        let mut seen = observed(ROUTE, "");
        seen.nameservers = Some((ResolverSource::Resolved, dns));
        check("test-0", &[nic()], &seen).unwrap();
    }

    #[test]
    fn dhcp_interfaces_are_not_checked_and_garbage_output_is_an_error() {
        let seen = observed("[]", "");
        check("test-0", &[Interface::default()], &seen).unwrap();
        let e = parse_links("test-0", "Usage: ip [ OPTIONS ]").unwrap_err().to_string();
        assert!(e.contains("test-0") && e.contains("ip -j addr show"), "{e}");
    }
}
