//! NICs from `vms_config.nicN` and `vms_config.network.nicN` (N = 0..31). When both
//! are given their keys merge and the nested `network.nicN` wins key by key.
//!
//! Keys: `bridge` (required), `vlan` (1..4094), `ip` (required: `10.0.20.10/24`,
//! or an address plus `prefix` or `netmask`, or `dhcp`), `gateway`, `nameservers`,
//! `search`, `interface` (guest name; `nic0` defaults to `global_os[vms_os].interface`,
//! then `ens18`; other NICs must name theirs). The prefix always comes from the
//! inventory: an address without one is refused, never assumed to be /24.

use std::fmt;
use std::net::IpAddr;

use serde::Serialize;
use serde_json::{Map, Value};

use super::InventoryError;
use super::spec::{NicRecord, OsTemplate, ResolveOptions};
use super::values::Ctx;

const MAX_NICS: usize = 32;
const NIC_KEYS: [&str; 9] =
    ["bridge", "vlan", "ip", "prefix", "netmask", "gateway", "nameservers", "search", "interface"];
const IP_FORM: &str = "an address with its prefix (10.0.20.10/24), an address plus prefix: or netmask:, or dhcp";

/// An address with its prefix length, e.g. `10.0.20.10/24` (serialized so).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpCidr {
    /// The address.
    pub addr: IpAddr,
    /// The prefix length.
    pub prefix: u8,
}

impl fmt::Display for IpCidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Serialize for IpCidr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One network interface, resolved. Serialized with its addresses as text
/// (`10.0.20.10/24`, `10.0.20.1`): that is `vm.nics` in a workflow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Nic {
    /// Proxmox slot, `net0`.
    pub slot: String,
    /// Bridge on the node, `vmbr0`.
    pub bridge: String,
    /// VLAN tag.
    pub vlan: Option<u16>,
    /// Static address; `None` means DHCP.
    pub address: Option<IpCidr>,
    /// Default gateway.
    pub gateway: Option<IpAddr>,
    /// DNS servers.
    pub nameservers: Vec<IpAddr>,
    /// DNS search domains.
    pub search: Vec<String>,
    /// The guest's interface name the network-data is rendered for.
    pub guest_interface: String,
}

impl Nic {
    /// The WIT `nic` record.
    pub fn spec(&self) -> NicRecord {
        NicRecord {
            slot: self.slot.clone(),
            bridge: self.bridge.clone(),
            vlan: self.vlan,
            address: self.address.map(|a| a.to_string()),
            gateway: self.gateway.map(|g| g.to_string()),
            guest_interface: self.guest_interface.clone(),
        }
    }
}

pub(crate) fn nics(
    ctx: &Ctx<'_>,
    config: &Map<String, Value>,
    os: &OsTemplate,
    opts: &ResolveOptions,
) -> Result<Vec<Nic>, InventoryError> {
    let network = match config.get("network") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => return Err(ctx.invalid("vms_config.network", other, "a mapping of nic0, nic1, ...")),
    };
    let mut out = Vec::new();
    for n in 0..MAX_NICS {
        let key = format!("nic{n}");
        // (path, key, value), nested entries last so they win.
        let mut fields: Vec<(String, String, Value)> = Vec::new();
        for (prefix, source) in [("vms_config", config), ("vms_config.network", &network)] {
            match source.get(&key) {
                None | Some(Value::Null) => {}
                Some(Value::Object(m)) => {
                    fields.extend(m.iter().map(|(k, v)| (format!("{prefix}.{key}.{k}"), k.clone(), v.clone())));
                }
                Some(other) => {
                    return Err(ctx.invalid(
                        &format!("{prefix}.{key}"),
                        other,
                        "a mapping { bridge, vlan, ip, gateway, ... }",
                    ));
                }
            }
        }
        if fields.is_empty() {
            continue;
        }
        for (path, k, _) in &fields {
            if !NIC_KEYS.contains(&k.as_str()) {
                tracing::warn!(host = ctx.host(), variable = %path, "not used by cradle");
            }
        }
        let get = |k: &str| fields.iter().rev().find(|(_, fk, _)| fk == k).map(|(p, _, v)| (p.as_str(), v));
        out.push(nic(ctx, n, &key, &get, os, opts)?);
    }
    if out.is_empty() {
        return Err(ctx.missing(
            "vms_config.nic0",
            "give the VM a NIC: vms_config.nic0 (or vms_config.network.nic0) with bridge and ip",
        ));
    }
    Ok(out)
}

fn nic<'a>(
    ctx: &Ctx<'_>,
    n: usize,
    key: &str,
    get: &dyn Fn(&str) -> Option<(&'a str, &'a Value)>,
    os: &OsTemplate,
    opts: &ResolveOptions,
) -> Result<Nic, InventoryError> {
    let bridge = match get("bridge") {
        Some((p, v)) => {
            let bridge = ctx.string(p, v)?;
            if !super::hardware::is_bridge_id(&bridge) {
                return Err(ctx.invalid(p, v, "a Proxmox bridge name such as vmbr0 (letters, digits, - _ .)"));
            }
            bridge
        }
        None => {
            return Err(ctx.missing(&format!("vms_config.{key}.bridge"), "name the node's bridge, e.g. bridge: vmbr0"));
        }
    };
    let vlan = match get("vlan") {
        None | Some((_, Value::Null)) => None,
        Some((p, v)) => Some(ctx.int(p, v, 1, 4094, "a VLAN tag, a whole number 1..4094")? as u16),
    };
    let address = match get("ip") {
        None => {
            return Err(ctx.missing(
                &format!("vms_config.{key}.ip"),
                "set ip: 10.0.20.10/24 (the prefix from your network), or ip: dhcp",
            ));
        }
        Some((p, v)) => address(ctx, p, v, get("prefix"), get("netmask"))?,
    };
    let gateway = match get("gateway") {
        None | Some((_, Value::Null)) => None,
        Some((p, v)) => {
            let gw = ctx.ip(p, v)?;
            match address {
                None => return Err(ctx.invalid(p, v, "no gateway with ip: dhcp (DHCP supplies the route)")),
                Some(a) if a.addr.is_ipv4() != gw.is_ipv4() => {
                    return Err(ctx.invalid(p, v, "a gateway of the same address family as ip"));
                }
                Some(_) => Some(gw),
            }
        }
    };
    let nameservers = match get("nameservers") {
        None => Vec::new(),
        Some((p, v)) => {
            let items = ctx.strings(p, v)?;
            items.iter().map(|s| ctx.ip(p, &Value::String(s.clone()))).collect::<Result<_, _>>()?
        }
    };
    let search = match get("search") {
        None => Vec::new(),
        Some((p, v)) => ctx.strings(p, v)?,
    };
    let guest_interface = match get("interface") {
        Some((p, v)) => interface(ctx, p, v)?,
        None if n == 0 => os.guest_interface.clone().unwrap_or_else(|| opts.default_guest_interface.clone()),
        None => {
            return Err(ctx.missing(
                &format!("vms_config.{key}.interface"),
                "name the guest interface of this NIC, e.g. interface: ens19",
            ));
        }
    };
    Ok(Nic { slot: format!("net{n}"), bridge, vlan, address, gateway, nameservers, search, guest_interface })
}

fn interface(ctx: &Ctx<'_>, path: &str, v: &Value) -> Result<String, InventoryError> {
    let s = ctx.string(path, v)?;
    let ok = s.len() <= 15 && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok { Ok(s) } else { Err(ctx.invalid(path, v, "a Linux interface name (at most 15 characters), e.g. ens18")) }
}

fn address(
    ctx: &Ctx<'_>,
    path: &str,
    v: &Value,
    prefix: Option<(&str, &Value)>,
    netmask: Option<(&str, &Value)>,
) -> Result<Option<IpCidr>, InventoryError> {
    let text = ctx.string(path, v)?;
    if text.eq_ignore_ascii_case("dhcp") {
        return Ok(None);
    }
    let (addr_text, inline) = match text.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (text.as_str(), None),
    };
    let addr: IpAddr = addr_text.trim().parse().map_err(|_| ctx.invalid(path, v, IP_FORM))?;
    let max: u64 = if addr.is_ipv4() { 32 } else { 128 };
    let range_form = format!("a prefix length 1..{max}");
    let mut found: Vec<(u64, &str, &Value)> = Vec::new();
    if let Some(p) = inline {
        let n = p
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|n| (1..=max).contains(n))
            .ok_or_else(|| ctx.invalid(path, v, &format!("{IP_FORM}; the prefix must be 1..{max}")))?;
        found.push((n, path, v));
    }
    if let Some((p, pv)) = prefix {
        let s = pv.as_str().map(|s| s.trim_start_matches('/').to_string());
        let val = s.map(Value::String).unwrap_or_else(|| pv.clone());
        found.push((ctx.int(p, &val, 1, max, &range_form)?, p, pv));
    }
    if let Some((p, mv)) = netmask {
        let mask: IpAddr = ctx.ip(p, mv)?;
        let bits = match mask {
            IpAddr::V4(m) if addr.is_ipv4() => u32::from(m),
            _ => return Err(ctx.invalid(p, mv, "an IPv4 netmask such as 255.255.255.0 (IPv6 uses prefix)")),
        };
        let len = bits.leading_ones();
        if bits.checked_shl(len).unwrap_or(0) != 0 || len == 0 {
            return Err(ctx.invalid(p, mv, "a contiguous netmask such as 255.255.255.0"));
        }
        found.push((u64::from(len), p, mv));
    }
    match found.as_slice() {
        [] => Err(ctx.invalid(path, v, &format!("{IP_FORM} (cradle never assumes /24)"))),
        [(n, ..), rest @ ..] => {
            if let Some((_, p, pv)) = rest.iter().find(|(m, ..)| m != n) {
                return Err(ctx.invalid(p, pv, &format!("the same prefix as the other setting of this NIC (/{n})")));
            }
            Ok(Some(IpCidr { addr, prefix: *n as u8 }))
        }
    }
}
