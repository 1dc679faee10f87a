//! network-data: network config version 2 (netplan subset) for the guest's NICs,
//! rendered by [`render_network_data`] as the parent module's contract says; also
//! [`Cidr`] (an address with its prefix) and [`resolv_conf`] (the
//! `/etc/resolv.conf` the user-data writes).
//!
//! Failures name the VM, the field and the value: no NIC, a second default
//! gateway of one family, a gateway on a DHCP NIC or equal to the VM's address, a
//! network or broadcast address, a bad or duplicate MAC or interface name, a VLAN
//! ID outside 1-4094, an MTU under 576, a bad search domain or more than three
//! nameservers is [`CloudInitError::Invalid`]; a gateway outside the NIC's subnet
//! is [`CloudInitError::GatewayOutsideSubnet`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::Serialize;

use super::{CloudInitError, Snippet, check_dns_name, invalid, snippet_names, to_document};

/// The interface name of the usual Proxmox cloud-init templates (virtio NIC, Debian/Ubuntu).
pub const DEFAULT_INTERFACE: &str = "ens18";

/// An address with its prefix length, e.g. `192.0.2.10/23`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

/// A string that is not `<ip>/<prefix>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not an address with prefix length such as 192.0.2.10/24 or 2001:db8::5/64: {problem}")]
pub struct CidrParseError {
    input: String,
    problem: &'static str,
}

impl Cidr {
    /// `None` when the prefix is 0 or longer than the address family allows.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Cidr> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        (1..=max).contains(&prefix).then_some(Cidr { addr, prefix })
    }

    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` lies in this address's subnet.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(a) & mask == u32::from(b) & mask
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(a) & mask == u128::from(b) & mask
            }
            _ => false,
        }
    }

    /// IPv4 with prefix ≤ 30: the address is the network or broadcast address.
    fn is_network_or_broadcast(&self) -> bool {
        match self.addr {
            IpAddr::V4(a) if self.prefix <= 30 => {
                let host = u32::MAX >> self.prefix;
                let bits = u32::from(a) & host;
                bits == 0 || bits == host
            }
            _ => false,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl FromStr for Cidr {
    type Err = CidrParseError;

    fn from_str(s: &str) -> Result<Cidr, CidrParseError> {
        let err = |problem| CidrParseError { input: s.to_string(), problem };
        let (addr, prefix) = s.split_once('/').ok_or_else(|| err("the `/<prefix>` is missing"))?;
        let addr: IpAddr = addr.parse().map_err(|_| err("the address is not an IP address"))?;
        let prefix: u8 = prefix.parse().map_err(|_| err("the prefix is not a number"))?;
        Cidr::new(addr, prefix).ok_or_else(|| err("the prefix is out of range for the address family"))
    }
}

/// One guest NIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Name in the guest ([`DEFAULT_INTERFACE`] by default); with `mac`, the name it is given.
    pub name: String,
    /// Match the NIC by this MAC (`match: {macaddress}` + `set-name: <name>`).
    pub mac: Option<String>,
    /// Static address with the inventory's prefix; `None` = DHCPv4.
    pub address: Option<Cidr>,
    /// Default gateway; must lie in `address`'s subnet.
    pub gateway: Option<IpAddr>,
    pub nameservers: Vec<IpAddr>,
    pub search: Vec<String>,
    pub mtu: Option<u16>,
    /// Only for a trunk NIC where the guest tags itself; leave `None` when Proxmox
    /// tags on the bridge (`net0 ...,tag=N`), the normal case.
    pub vlan_in_guest: Option<u16>,
}

impl Default for Interface {
    /// `ens18`, DHCPv4, nothing else.
    fn default() -> Interface {
        Interface {
            name: DEFAULT_INTERFACE.to_string(),
            mac: None,
            address: None,
            gateway: None,
            nameservers: Vec::new(),
            search: Vec::new(),
            mtu: None,
            vlan_in_guest: None,
        }
    }
}

/// Inputs of one VM's network-data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkData {
    /// Canonical VM name (`vms_name`): names the snippet file and every error.
    pub vm_name: String,
    pub interfaces: Vec<Interface>,
}

#[derive(Serialize)]
struct NetworkConfig {
    version: u8,
    ethernets: BTreeMap<String, Ethernet>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    vlans: BTreeMap<String, Vlan>,
}

#[derive(Serialize)]
struct Ethernet {
    #[serde(rename = "match", skip_serializing_if = "Option::is_none")]
    match_mac: Option<MatchMac>,
    #[serde(rename = "set-name", skip_serializing_if = "Option::is_none")]
    set_name: Option<String>,
    #[serde(flatten)]
    ip: IpConfig,
}

#[derive(Serialize)]
struct MatchMac {
    macaddress: String,
}

#[derive(Serialize)]
struct Vlan {
    id: u16,
    link: String,
    #[serde(flatten)]
    ip: IpConfig,
}

#[derive(Serialize, Default)]
struct IpConfig {
    dhcp4: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    addresses: Vec<String>,
    /// The default gateway as `gateway4`/`gateway6`, never a `routes:` entry: see
    /// the module docs of `cloudinit` (ENI renders routes as `post-up route add`).
    #[serde(skip_serializing_if = "Option::is_none")]
    gateway4: Option<IpAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gateway6: Option<IpAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nameservers: Option<Nameservers>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mtu: Option<u16>,
}

#[derive(Serialize)]
struct Nameservers {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    addresses: Vec<IpAddr>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    search: Vec<String>,
}

/// Renders `<vm>-network.yaml`. See the module docs for the format.
pub fn render_network_data(d: &NetworkData) -> Result<Snippet, CloudInitError> {
    let names = snippet_names(&d.vm_name)?;
    let vm = d.vm_name.as_str();
    if d.interfaces.is_empty() {
        return Err(invalid(vm, "interfaces", "", "must list at least one NIC (nic0 in the inventory)"));
    }
    let mut doc = NetworkConfig { version: 2, ethernets: BTreeMap::new(), vlans: BTreeMap::new() };
    let mut used_names = BTreeSet::new();
    let mut used_macs = BTreeSet::new();
    let mut gateway_on: BTreeMap<bool, String> = BTreeMap::new();
    for nic in &d.interfaces {
        let ip = ip_config(vm, nic)?;
        if let Some(gw) = nic.gateway
            && let Some(first) = gateway_on.insert(gw.is_ipv4(), nic.name.clone())
        {
            let problem = format!("interface {first} already has the default gateway; set a gateway on one NIC only");
            return Err(invalid(vm, "gateway", &gw.to_string(), problem));
        }
        let match_mac = match &nic.mac {
            Some(mac) => {
                let mac = normalize_mac(vm, mac)?;
                if !used_macs.insert(mac.clone()) {
                    return Err(invalid(vm, "MAC address", &mac, "is given to two interfaces"));
                }
                Some(MatchMac { macaddress: mac })
            }
            None => None,
        };
        let set_name = match_mac.as_ref().map(|_| nic.name.clone());
        let ethernet = |ip| Ethernet { match_mac, set_name, ip };
        match nic.vlan_in_guest {
            None => {
                claim_name(vm, &mut used_names, &nic.name)?;
                doc.ethernets.insert(nic.name.clone(), ethernet(ip));
            }
            Some(id) => {
                if !(1..=4094).contains(&id) {
                    return Err(invalid(vm, "vlan_in_guest", &id.to_string(), "must be a VLAN ID 1-4094"));
                }
                let vlan_name = format!("{}.{id}", nic.name);
                claim_name(vm, &mut used_names, &nic.name)?;
                claim_name(vm, &mut used_names, &vlan_name)?;
                let parent = IpConfig { mtu: nic.mtu, ..IpConfig::default() };
                doc.ethernets.insert(nic.name.clone(), ethernet(parent));
                doc.vlans.insert(vlan_name, Vlan { id, link: nic.name.clone(), ip });
            }
        }
    }
    Ok(Snippet::new(names.network, to_document(vm, "network-data", None, &doc)?))
}

fn claim_name(vm: &str, used: &mut BTreeSet<String>, name: &str) -> Result<(), CloudInitError> {
    let ok = !name.is_empty()
        && name.len() <= 15
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
        && name != "."
        && name != "..";
    if !ok {
        let problem = "must be a Linux interface name: 1-15 letters, digits, `_`, `.`, `-` (default ens18)";
        return Err(invalid(vm, "interface name", name, problem));
    }
    if !used.insert(name.to_string()) {
        return Err(invalid(vm, "interface name", name, "is used twice; give each NIC its own name"));
    }
    Ok(())
}

fn normalize_mac(vm: &str, mac: &str) -> Result<String, CloudInitError> {
    let parts: Vec<&str> = mac.split(':').collect();
    let ok = parts.len() == 6 && parts.iter().all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()));
    if !ok {
        return Err(invalid(vm, "MAC address", mac, "must be six hex octets separated by `:`"));
    }
    Ok(mac.to_ascii_lowercase())
}

fn ip_config(vm: &str, nic: &Interface) -> Result<IpConfig, CloudInitError> {
    let field = |f: &str| format!("interface {} {f}", nic.name);
    let mut ip = IpConfig { dhcp4: nic.address.is_none(), mtu: nic.mtu, ..IpConfig::default() };
    if let Some(mtu) = nic.mtu
        && mtu < 576
    {
        return Err(invalid(vm, field("mtu"), &mtu.to_string(), "must be at least 576"));
    }
    if let Some(addr) = nic.address {
        if addr.is_network_or_broadcast() || addr.addr().is_unspecified() || addr.addr().is_multicast() {
            let problem = "is the subnet's network or broadcast address (or not a host address); \
                           give the VM a host address with the right prefix";
            return Err(invalid(vm, field("address"), &addr.to_string(), problem));
        }
        ip.addresses.push(addr.to_string());
    }
    if let Some(gw) = nic.gateway {
        let Some(addr) = nic.address else {
            let problem = "is set but the interface uses DHCP (no address); set a static address or drop the gateway";
            return Err(invalid(vm, field("gateway"), &gw.to_string(), problem));
        };
        if !addr.contains(gw) {
            return Err(CloudInitError::GatewayOutsideSubnet {
                vm: vm.to_string(),
                interface: nic.name.clone(),
                gateway: gw,
                address: addr,
            });
        }
        if gw == addr.addr() {
            return Err(invalid(vm, field("gateway"), &gw.to_string(), "is the VM's own address"));
        }
        if gw.is_ipv4() {
            ip.gateway4 = Some(gw);
        } else {
            ip.gateway6 = Some(gw);
        }
    }
    for domain in &nic.search {
        check_dns_name(vm, &field("search domain"), domain, false)?;
    }
    if !nic.nameservers.is_empty() || !nic.search.is_empty() {
        ip.nameservers = Some(Nameservers { addresses: nic.nameservers.clone(), search: nic.search.clone() });
    }
    Ok(ip)
}

/// glibc's resolver reads at most this many `nameserver` lines (`MAXNS`).
pub const MAX_NAMESERVERS: usize = 3;

/// The `/etc/resolv.conf` a guest with these NICs must end up with, or `None` when
/// no NIC names nameservers or search domains (DHCP then supplies them).
///
/// Why cradle writes this file itself (through user-data `write_files`): the
/// network-data `nameservers` reach the resolver only through a manager. Under
/// netplan they go to systemd-networkd → systemd-resolved; under ifupdown (ENI,
/// Debian 12's renderer) they become `dns-nameservers`, which only the
/// `resolvconf` package applies, and a minimal image lacks it. cloud-init's own
/// `manage_resolv_conf`/`resolv_conf` is no way out: in 22.4 `cc_resolv_conf` is
/// restricted to alpine/fedora/mariner/opensuse/photon/rhel/sles and is not in
/// Debian's `cloud_init_modules`, so on Debian it is skipped without a word.
/// `write_files` runs on every distro. Where `/etc/resolv.conf` is a symlink
/// (systemd-resolved's stub, resolvconf's run file) the write goes through it and
/// the manager later rewrites the file with the same servers from network-data.
pub fn resolv_conf(d: &NetworkData) -> Result<Option<String>, CloudInitError> {
    let vm = d.vm_name.as_str();
    let mut servers: Vec<IpAddr> = Vec::new();
    let mut search: Vec<&str> = Vec::new();
    for nic in &d.interfaces {
        for ns in &nic.nameservers {
            if !servers.contains(ns) {
                servers.push(*ns);
            }
        }
        for domain in &nic.search {
            check_dns_name(vm, &format!("interface {} search domain", nic.name), domain, false)?;
            if !search.contains(&domain.as_str()) {
                search.push(domain);
            }
        }
    }
    if servers.len() > MAX_NAMESERVERS {
        let list = servers.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        let problem = format!(
            "lists {} nameservers; the guest's resolver (glibc) uses at most {MAX_NAMESERVERS}: keep three",
            servers.len()
        );
        return Err(invalid(vm, "nameservers", &list, problem));
    }
    if servers.is_empty() && search.is_empty() {
        return Ok(None);
    }
    let mut text = String::from("# Written by cradle (cloud-init write_files) from the inventory's nameservers.\n");
    for ns in &servers {
        text.push_str(&format!("nameserver {ns}\n"));
    }
    if !search.is_empty() {
        text.push_str(&format!("search {}\n", search.join(" ")));
    }
    Ok(Some(text))
}
