//! DHCP for simulated guests: an interface whose network-data asks for DHCP gets its
//! IPv4 address at every boot from the cluster's DHCP server (`SimConfig::dhcp`, a
//! UniFi stand-in's [`UnifiDhcp`](crate::services::unifi::UnifiDhcp)).
//!
//! Contract: [`interfaces`] reads the DHCP interfaces of network-config v2 (`dhcp4:
//! true` under `ethernets`) or v1 (`physical` entries with a `dhcp`/`dhcp4` subnet).
//! Each is bound to a NIC of the VM: the one with its `match.macaddress` /
//! `mac_address`, else by name (`ens18` = `net0`, `ens19` = `net1`, ... — the PCI slots
//! PVE gives virtio NICs — or `ethN` = `netN`), else the only NIC; a container's
//! `netN` with `ip=dhcp` is its own interface (`name=`, `hwaddr=`). The NIC's `tag=`
//! picks the network (VLAN). Every exchange is recorded as a [`DhcpLease`] (with its
//! [`Stamp`], so a test can order it after the reservation it used) — offers and
//! refusals alike; no DHCP server configured is a refusal. A guest's address is its
//! first static address, else its first leased one; leased addresses and their
//! gateway show in the guest's `ip addr`/`ip route` for that boot.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde_yaml_ng::Value as Yaml;

use super::cloudinit::{get, yaml_str};
use crate::model::{DhcpIface, GuestLink, GuestNet, GuestRoute, Vm, props};
use crate::services::Stamp;
use crate::services::unifi::DhcpOffer;
use crate::sim::{Sim, lock};

/// One DHCP exchange of a simulated guest's interface at boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DhcpLease {
    /// The VM (or container).
    pub vmid: u32,
    /// The NIC (`net0`).
    pub nic: String,
    /// The interface in the guest (`ens18`).
    pub interface: String,
    /// The NIC's MAC, lower-case.
    pub mac: String,
    /// The NIC's VLAN tag.
    pub vlan: Option<u16>,
    /// A power-on (a cold start), not an in-guest reboot.
    pub cold_boot: bool,
    /// When it happened.
    pub at: Stamp,
    /// What the server answered.
    pub offer: DhcpOffer,
}

impl DhcpLease {
    /// The leased address, if any.
    pub fn ip(&self) -> Option<Ipv4Addr> {
        self.offer.ip()
    }

    /// Whether the address is the NIC's reservation.
    pub fn is_reserved(&self) -> bool {
        self.offer.is_reserved()
    }
}

/// An address a lease gave an interface for one boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestLease {
    /// The interface.
    pub interface: String,
    /// The address.
    pub ip: Ipv4Addr,
    /// Its prefix length.
    pub prefix: u8,
    /// The router the server named.
    pub gateway: Ipv4Addr,
}

/// A DHCP interface bound to its NIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DhcpNic {
    interface: String,
    nic: String,
    mac: String,
    vlan: Option<u16>,
}

fn truthy(v: Option<&Yaml>) -> bool {
    match v {
        Some(Yaml::Bool(b)) => *b,
        Some(Yaml::String(s)) => matches!(s.to_ascii_lowercase().as_str(), "true" | "yes" | "on"),
        _ => false,
    }
}

/// The interfaces network-config `network` configures with DHCP.
pub fn interfaces(network: &str) -> Vec<DhcpIface> {
    let Ok(doc) = serde_yaml_ng::from_str::<Yaml>(network) else { return Vec::new() };
    let doc = get(&doc, "network").cloned().unwrap_or(doc);
    let mac_of = |v: Option<&Yaml>| v.and_then(yaml_str).map(|m| m.to_ascii_lowercase());
    let mut out = Vec::new();
    if get(&doc, "version").and_then(yaml_str).as_deref() == Some("2") {
        let Some(Yaml::Mapping(ifs)) = get(&doc, "ethernets") else { return out };
        for (id, iface) in ifs {
            let Some(id) = yaml_str(id) else { continue };
            if !truthy(get(iface, "dhcp4")) {
                continue;
            }
            let name = get(iface, "set-name").and_then(yaml_str).unwrap_or_else(|| id.clone());
            let mac = mac_of(get(iface, "match").and_then(|m| get(m, "macaddress")));
            out.push(DhcpIface { name, id, mac });
        }
    } else if let Some(Yaml::Sequence(cfg)) = get(&doc, "config") {
        for item in cfg {
            let physical = get(item, "type").and_then(yaml_str).is_some_and(|t| t == "physical");
            let dhcp = match get(item, "subnets") {
                Some(Yaml::Sequence(s)) => {
                    s.iter().any(|sn| get(sn, "type").and_then(yaml_str).is_some_and(|t| t == "dhcp" || t == "dhcp4"))
                }
                _ => false,
            };
            let Some(name) = get(item, "name").and_then(yaml_str).filter(|_| physical && dhcp) else { continue };
            out.push(DhcpIface { id: name.clone(), name, mac: mac_of(get(item, "mac_address")) });
        }
    }
    out
}

/// A VM's NICs: (`netN`, MAC lower-case, VLAN tag), in `N` order.
fn vm_nics(config: &BTreeMap<String, String>) -> Vec<(String, String, Option<u16>)> {
    let mut nics: Vec<(u32, String, String, Option<u16>)> = config
        .iter()
        .filter_map(|(k, v)| {
            let n: u32 = k.strip_prefix("net")?.parse().ok()?;
            let p = props::split_props(v);
            let mac = p.iter().find(|(m, _)| props::NIC_MODELS.contains(&m.as_str()))?.1.to_ascii_lowercase();
            let tag = p.iter().find(|(k, _)| k == "tag").and_then(|(_, t)| t.parse().ok());
            Some((n, k.clone(), mac, tag))
        })
        .collect();
    nics.sort();
    nics.into_iter().map(|(_, k, m, t)| (k, m, t)).collect()
}

/// The NIC an interface is: by MAC, by name, or the only one.
fn bind(iface: &DhcpIface, nics: &[(String, String, Option<u16>)]) -> Option<DhcpNic> {
    let by_name = |name: &str| -> Option<usize> {
        let n: u32 = if let Some(slot) = name.strip_prefix("ens") {
            slot.parse::<u32>().ok()?.checked_sub(18)?
        } else {
            name.strip_prefix("eth")?.parse().ok()?
        };
        nics.iter().position(|(k, _, _)| *k == format!("net{n}"))
    };
    let idx = match &iface.mac {
        Some(mac) => nics.iter().position(|(_, m, _)| m == mac)?,
        None => by_name(&iface.name).or_else(|| by_name(&iface.id)).or((nics.len() == 1).then_some(0))?,
    };
    let (nic, mac, vlan) = nics[idx].clone();
    Some(DhcpNic { interface: iface.name.clone(), nic, mac, vlan })
}

/// A container's `netN` entries with `ip=dhcp`.
fn ct_nics(config: &BTreeMap<String, String>) -> Vec<DhcpNic> {
    let mut out: Vec<(u32, DhcpNic)> = config
        .iter()
        .filter_map(|(k, v)| {
            let n: u32 = k.strip_prefix("net")?.parse().ok()?;
            let p: BTreeMap<String, String> = props::split_props(v).into_iter().collect();
            if p.get("ip").map(String::as_str) != Some("dhcp") {
                return None;
            }
            let nic = DhcpNic {
                interface: p.get("name").cloned().unwrap_or_else(|| "eth0".into()),
                nic: k.clone(),
                mac: p.get("hwaddr")?.to_ascii_lowercase(),
                vlan: p.get("tag").and_then(|t| t.parse().ok()),
            };
            Some((n, nic))
        })
        .collect();
    out.sort_by_key(|(n, _)| *n);
    out.into_iter().map(|(_, d)| d).collect()
}

/// The DHCP interfaces of a guest as it is configured now.
pub(super) fn nics(vm: &Vm) -> Vec<DhcpNic> {
    if vm.is_ct() {
        return ct_nics(&vm.config);
    }
    let nics = vm_nics(&vm.config);
    vm.disk
        .dhcp
        .iter()
        .filter_map(|iface| {
            let bound = bind(iface, &nics);
            if bound.is_none() {
                tracing::warn!(vmid = vm.vmid, interface = %iface.name, "no NIC for this DHCP interface");
            }
            bound
        })
        .collect()
}

/// Run DHCP for `nics` at a boot of `vmid`; records each exchange, returns the leases.
pub(super) fn acquire(sim: &Sim, vmid: u32, nics: &[DhcpNic], hostname: &str, cold_boot: bool) -> Vec<GuestLease> {
    let mut leases = Vec::new();
    for n in nics {
        let offer = match &sim.cfg.dhcp {
            Some(server) => server.request(&n.mac, n.vlan, Some(hostname)),
            None => DhcpOffer::NoOffer { reason: "no DHCP server on the guests' network (SimConfig::dhcp)".into() },
        };
        match (&offer, offer.lease()) {
            (_, Some((ip, prefix, gateway))) => {
                tracing::debug!(vmid, interface = %n.interface, %ip, reserved = offer.is_reserved(), "DHCP lease");
                leases.push(GuestLease { interface: n.interface.clone(), ip, prefix, gateway });
            }
            (DhcpOffer::NoOffer { reason }, None) => {
                tracing::warn!(vmid, interface = %n.interface, "DHCP: no address: {reason}");
            }
            _ => {}
        }
        let lease = DhcpLease {
            vmid,
            nic: n.nic.clone(),
            interface: n.interface.clone(),
            mac: n.mac.clone(),
            vlan: n.vlan,
            cold_boot,
            at: Stamp::now(),
            offer,
        };
        lock(&sim.dhcp_leases).push(lease);
    }
    leases
}

/// What `ip` shows: the installed network plus this boot's leases (and, without a
/// default route, the lease's router).
pub(super) fn with_leases(mut net: GuestNet, leases: &[GuestLease]) -> GuestNet {
    for l in leases {
        let cidr = format!("{}/{}", l.ip, l.prefix);
        match net.links.iter_mut().find(|k| k.name == l.interface) {
            Some(link) if !link.addresses.contains(&cidr) => link.addresses.push(cidr),
            Some(_) => {}
            None => net.links.push(GuestLink { name: l.interface.clone(), addresses: vec![cidr] }),
        }
        if !net.routes.iter().any(|r| r.gateway.is_ipv4()) {
            net.routes.push(GuestRoute { gateway: l.gateway.into(), dev: l.interface.clone() });
        }
    }
    net
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dhcp_interfaces_of_v2_and_v1_bind_to_nics_by_mac_name_or_alone() {
        let v2 = "version: 2\nethernets:\n  ens18:\n    dhcp4: true\n  lan:\n    match: {macaddress: 'BC:24:11:00:00:02'}\n    set-name: lan\n    dhcp4: yes\n  ens20:\n    addresses: [127.0.0.5/8]\n";
        let ifs = interfaces(v2);
        assert_eq!(ifs.len(), 2);
        assert_eq!(ifs[1], DhcpIface { name: "lan".into(), id: "lan".into(), mac: Some("bc:24:11:00:00:02".into()) });
        let v1 = "version: 1\nconfig:\n  - type: physical\n    name: eth0\n    mac_address: 'bc:24:11:00:00:01'\n    subnets:\n      - type: dhcp4\n";
        assert_eq!(interfaces(v1)[0].mac.as_deref(), Some("bc:24:11:00:00:01"));
        assert!(interfaces("version: 2\nethernets:\n  ens18:\n    dhcp4: false\n").is_empty());
        assert!(interfaces(": : [").is_empty());

        let config: BTreeMap<String, String> = [
            ("net0".to_string(), "virtio=BC:24:11:00:00:01,bridge=vmbr0".to_string()),
            ("net1".to_string(), "virtio=BC:24:11:00:00:02,bridge=vmbr0,tag=20".to_string()),
        ]
        .into();
        let nics = vm_nics(&config);
        let b = bind(&ifs[0], &nics).unwrap();
        assert_eq!((b.nic.as_str(), b.mac.as_str(), b.vlan), ("net0", "bc:24:11:00:00:01", None));
        let b = bind(&ifs[1], &nics).unwrap();
        assert_eq!((b.nic.as_str(), b.vlan), ("net1", Some(20)));
        let odd = DhcpIface { name: "enp1s0".into(), id: "enp1s0".into(), mac: None };
        assert!(bind(&odd, &nics).is_none(), "two NICs and no hint");
        assert_eq!(bind(&odd, &nics[..1]).unwrap().nic, "net0", "the only NIC");
    }

    #[test]
    fn a_lease_shows_in_the_guest_network_with_its_router() {
        let lease = GuestLease {
            interface: "ens18".into(),
            ip: Ipv4Addr::new(127, 77, 0, 9),
            prefix: 24,
            gateway: Ipv4Addr::new(127, 77, 0, 1),
        };
        let net =
            GuestNet { links: vec![GuestLink { name: "ens18".into(), addresses: vec![] }], ..GuestNet::default() };
        let net = with_leases(net, &[lease]);
        assert_eq!(net.links[0].addresses, vec!["127.77.0.9/24".to_string()]);
        assert_eq!(net.routes, vec![GuestRoute { gateway: "127.77.0.1".parse().unwrap(), dev: "ens18".into() }]);
        let ct: BTreeMap<String, String> = [(
            "net0".to_string(),
            "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:05,ip=dhcp,tag=30,type=veth".to_string(),
        )]
        .into();
        assert_eq!(
            ct_nics(&ct),
            vec![DhcpNic {
                interface: "eth0".into(),
                nic: "net0".into(),
                mac: "bc:24:11:00:00:05".into(),
                vlan: Some(30)
            }]
        );
    }
}
