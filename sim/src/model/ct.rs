//! Container config keys (pve-container `PVE::LXC::Config`, `$confdesc` and
//! `$netconf_desc`): which exist, how values are validated and how PVE writes them.
//!
//! Contract: [`normalize`] returns the value as PVE stores it — a `netN` is printed by
//! `print_property_string` (required key `name` first, then the others sorted, `type=veth`
//! always, a generated `hwaddr` when none was given, as `parse_lxc_network` does) — or the
//! per-parameter message for a 400 `errors` map. Mount points (`mpN`), `lxc.*` raw keys,
//! `hookscript`, `dev*` and `unusedN` are not modelled and rejected as outside the schema.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::props::{NOT_IN_SCHEMA, split_props};

const PLAIN: &[&str] = &[
    "arch",
    "cmode",
    "console",
    "cores",
    "cpulimit",
    "cpuunits",
    "description",
    "features",
    "hostname",
    "memory",
    "nameserver",
    "onboot",
    "ostype",
    "protection",
    "rootfs",
    "searchdomain",
    "startup",
    "swap",
    "tags",
    "template",
    "timezone",
    "tty",
    "unprivileged",
];

const NET_KEYS: &[&str] = &[
    "name",
    "bridge",
    "hwaddr",
    "mtu",
    "ip",
    "gw",
    "ip6",
    "gw6",
    "firewall",
    "tag",
    "trunks",
    "rate",
    "link_down",
    "type",
    "host-managed",
];

/// Whether `key` is a container config key of the modelled schema.
pub fn is_config_key(key: &str) -> bool {
    PLAIN.contains(&key)
        || key
            .strip_prefix("net")
            .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|n| n <= 31)
}

fn fmt_err(key: &str, detail: &str) -> String {
    format!("invalid format - format error\n{key}.{detail}")
}

fn int_in(value: &str, min: i64, max: i64) -> Result<(), String> {
    let n: i64 = value.parse().map_err(|_| format!("type check ('integer') failed - got '{value}'"))?;
    if n < min {
        return Err(format!("value must have a minimum value of {min}"));
    }
    if n > max {
        return Err(format!("value must have a maximum value of {max}"));
    }
    Ok(())
}

fn boolean(value: &str) -> Result<(), String> {
    match value {
        "0" | "1" | "yes" | "no" | "on" | "off" | "true" | "false" => Ok(()),
        _ => Err(format!("type check ('boolean') failed - got '{value}'")),
    }
}

/// A `hostname` as pve-container's schema accepts it: pve-common's `dns-name`
/// ([`crate::model::props::valid_dns_name`]) within its `maxLength` of 255.
pub fn valid_dns_name(v: &str) -> bool {
    v.len() <= 255 && crate::model::props::valid_dns_name(v)
}

fn cidr<T: std::str::FromStr>(s: &str, max: u8) -> bool {
    s.split_once('/').is_some_and(|(ip, len)| ip.parse::<T>().is_ok() && len.parse::<u8>().is_ok_and(|l| l <= max))
}

fn valid_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 6 && parts.iter().all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// `netN` as `print_lxc_network` writes it.
fn normalize_net(key: &str, value: &str, new_mac: &mut dyn FnMut() -> String) -> Result<String, String> {
    let mut fields: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
    for (k, v) in split_props(value) {
        let k = if k.is_empty() { "name".to_string() } else { k };
        if !NET_KEYS.contains(&k.as_str()) {
            return Err(fmt_err(key, &format!("{k}: property is not defined in schema")));
        }
        let bad =
            |what: &str| Err(fmt_err(key, &format!("{k}: invalid format - value does not look like {what}: {v}")));
        match k.as_str() {
            "ip" if v != "dhcp" && v != "manual" && !cidr::<Ipv4Addr>(&v, 32) => {
                return bad("a valid IPv4 network configuration");
            }
            "ip6" if !["dhcp", "auto", "manual"].contains(&v.as_str()) && !cidr::<Ipv6Addr>(&v, 128) => {
                return bad("a valid IPv6 network configuration");
            }
            "gw" if v.parse::<Ipv4Addr>().is_err() => return bad("a valid IPv4 address"),
            "gw6" if v.parse::<Ipv6Addr>().is_err() => return bad("a valid IPv6 address"),
            "hwaddr" if !valid_mac(&v) => return bad("a valid MAC address"),
            "tag" => int_in(&v, 1, 4094).map_err(|e| fmt_err(key, &format!("tag: {e}")))?,
            "mtu" => int_in(&v, 64, 65535).map_err(|e| fmt_err(key, &format!("mtu: {e}")))?,
            "firewall" | "link_down" | "host-managed" => boolean(&v).map_err(|e| fmt_err(key, &format!("{k}: {e}")))?,
            _ => {}
        }
        fields.insert(k, v);
    }
    let Some(name) = fields.remove("name") else {
        return Err(fmt_err(key, "name: property is missing and it is not optional"));
    };
    fields.insert("type".into(), "veth".into());
    let mac = fields.get("hwaddr").map(|m| m.to_uppercase()).unwrap_or_else(&mut *new_mac);
    fields.insert("hwaddr".into(), mac);
    let mut out = format!("name={name}");
    for (k, v) in fields {
        out.push_str(&format!(",{k}={v}"));
    }
    Ok(out)
}

fn normalize_features(key: &str, value: &str) -> Result<String, String> {
    for (k, v) in split_props(value) {
        match k.as_str() {
            "nesting" | "keyctl" | "fuse" | "mknod" | "force_rw_sys" => {
                boolean(&v).map_err(|e| fmt_err(key, &format!("{k}: {e}")))?
            }
            "mount" => {}
            other => return Err(fmt_err(key, &format!("{other}: property is not defined in schema"))),
        }
    }
    Ok(value.to_string())
}

/// Validate and normalise a container config `key=value`. `new_mac` supplies MACs.
pub fn normalize(key: &str, value: &str, new_mac: &mut dyn FnMut() -> String) -> Result<String, String> {
    if !is_config_key(key) {
        return Err(NOT_IN_SCHEMA.to_string());
    }
    let ok = |r: Result<(), String>| r.map(|()| value.to_string());
    match key {
        "cores" => ok(int_in(value, 1, 8192)),
        "memory" => ok(int_in(value, 16, i64::from(u32::MAX))),
        "swap" => ok(int_in(value, 0, i64::from(u32::MAX))),
        "tty" => ok(int_in(value, 0, 6)),
        "cpuunits" => ok(int_in(value, 0, 500_000)),
        "onboot" | "protection" | "unprivileged" | "template" | "console" => ok(boolean(value)),
        "hostname" if !valid_dns_name(value) => {
            Err("invalid format - value does not look like a valid DNS name".into())
        }
        "arch" => match value {
            "amd64" | "i386" | "arm64" | "armhf" | "riscv32" | "riscv64" => Ok(value.to_string()),
            _ => Err(format!(
                "value '{value}' does not have a value in the enumeration 'amd64, i386, arm64, armhf, riscv32, riscv64'"
            )),
        },
        "cmode" => match value {
            "shell" | "console" | "tty" => Ok(value.to_string()),
            _ => Err(format!("value '{value}' does not have a value in the enumeration 'shell, console, tty'")),
        },
        "nameserver" => {
            if value.split([' ', ',', ';']).filter(|s| !s.is_empty()).all(|s| s.parse::<IpAddr>().is_ok()) {
                Ok(value.to_string())
            } else {
                Err(format!("invalid format - value does not look like a valid IP address: {value}"))
            }
        }
        "features" => normalize_features(key, value),
        "tags" => crate::model::props::unique_tags(value),
        k if k.starts_with("net") => normalize_net(key, value, new_mac),
        _ => Ok(value.to_string()),
    }
}

/// Keys whose values GET config returns as JSON integers.
pub fn is_integer_key(key: &str) -> bool {
    matches!(
        key,
        "cores"
            | "memory"
            | "swap"
            | "onboot"
            | "protection"
            | "unprivileged"
            | "template"
            | "tty"
            | "cpuunits"
            | "console"
    )
}

/// The first static IPv4 address of the container's `netN` entries (`ip=A/P`), with
/// the interface name, prefix and gateway.
pub fn first_ipv4(
    config: &std::collections::BTreeMap<String, String>,
) -> Option<(String, Ipv4Addr, u8, Option<Ipv4Addr>)> {
    let mut nets: Vec<(u32, &String)> = config
        .iter()
        .filter(|(k, _)| k.starts_with("net") && is_config_key(k))
        .filter_map(|(k, v)| k[3..].parse().ok().map(|n| (n, v)))
        .collect();
    nets.sort();
    nets.into_iter().find_map(|(_, v)| {
        let p: std::collections::BTreeMap<String, String> = split_props(v).into_iter().collect();
        let (ip, len) = p.get("ip")?.split_once('/')?;
        let name = p.get("name").cloned().unwrap_or_else(|| "eth0".into());
        Some((name, ip.parse().ok()?, len.parse().ok()?, p.get("gw").and_then(|g| g.parse().ok())))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac() -> String {
        "BC:24:11:00:00:01".into()
    }

    #[test]
    fn a_container_nic_is_printed_name_first_then_sorted_with_veth_and_a_generated_mac() {
        let v = normalize("net0", "name=eth0,bridge=vmbr0,ip=10.0.0.5/24,gw=10.0.0.1", &mut mac).unwrap();
        assert_eq!(v, "name=eth0,bridge=vmbr0,gw=10.0.0.1,hwaddr=BC:24:11:00:00:01,ip=10.0.0.5/24,type=veth");
        let v = normalize("net0", "bridge=vmbr0,name=eth0,hwaddr=26:2b:cc:e5:7f:f9", &mut mac).unwrap();
        assert_eq!(v, "name=eth0,bridge=vmbr0,hwaddr=26:2B:CC:E5:7F:F9,type=veth");
    }

    #[test]
    fn a_container_nic_without_name_or_with_a_bad_ip_is_refused() {
        let e = normalize("net0", "bridge=vmbr0", &mut mac).unwrap_err();
        assert!(e.contains("net0.name: property is missing"), "{e}");
        let e = normalize("net0", "name=eth0,ip=10.0.0.300/24", &mut mac).unwrap_err();
        assert!(e.contains("net0.ip: invalid format"), "{e}");
        assert_eq!(normalize("mp0", "local-lvm:8,mp=/srv", &mut mac).unwrap_err(), NOT_IN_SCHEMA);
        assert!(normalize("hostname", "-bad", &mut mac).is_err());
        assert!(normalize("memory", "8", &mut mac).is_err());
    }

    #[test]
    fn the_first_static_address_comes_from_the_lowest_numbered_nic() {
        let mut c = std::collections::BTreeMap::new();
        c.insert("net1".to_string(), "name=eth1,ip=127.0.9.9/8,type=veth".to_string());
        c.insert("net0".to_string(), "name=eth0,ip=dhcp,type=veth".to_string());
        let (name, ip, len, gw) = first_ipv4(&c).unwrap();
        assert_eq!((name.as_str(), ip, len, gw), ("eth1", Ipv4Addr::new(127, 0, 9, 9), 8, None));
    }
}
