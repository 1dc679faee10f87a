//! VM config keys: which exist, how their values are validated and normalised.
//!
//! Contract: [`normalize`] returns the value exactly as PVE stores and returns it (e.g.
//! `net0: virtio=BC:24:11:..,bridge=vmbr0`, a generated MAC when none was given) or a
//! per-parameter error message in PVE's wording for the 400 `errors` map. Keys outside
//! the modelled schema are rejected as PVE rejects unknown properties.

use std::net::{IpAddr, Ipv4Addr};

/// PVE's message for a parameter outside the schema.
pub const NOT_IN_SCHEMA: &str = "property is not defined in schema and the schema does not allow additional properties";

const PLAIN_KEYS: &[&str] = &[
    "acpi",
    "agent",
    "args",
    "autostart",
    "balloon",
    "bios",
    "boot",
    "bootdisk",
    "cicustom",
    "cipassword",
    "citype",
    "ciupgrade",
    "ciuser",
    "cores",
    "cpu",
    "cpulimit",
    "cpuunits",
    "description",
    "efidisk0",
    "freeze",
    "hookscript",
    "hotplug",
    "hugepages",
    "keyboard",
    "kvm",
    "localtime",
    "machine",
    "memory",
    "meta",
    "name",
    "nameserver",
    "numa",
    "onboot",
    "ostype",
    "protection",
    "scsihw",
    "searchdomain",
    "shares",
    "smbios1",
    "sockets",
    "sshkeys",
    "startup",
    "tablet",
    "tags",
    "template",
    "tpmstate0",
    "vcpus",
    "vga",
    "vmgenid",
    "watchdog",
    "rng0",
    "affinity",
];

const INDEXED: &[(&str, u32)] = &[
    ("net", 31),
    ("ipconfig", 31),
    ("ide", 3),
    ("sata", 5),
    ("scsi", 30),
    ("virtio", 15),
    ("serial", 3),
    ("usb", 4),
    ("hostpci", 15),
    ("unused", 255),
    ("numa", 7),
];

/// NIC models PVE accepts.
pub const NIC_MODELS: &[&str] = &[
    "e1000",
    "e1000-82540em",
    "e1000-82544gc",
    "e1000-82545em",
    "e1000e",
    "i82551",
    "i82557b",
    "i82559er",
    "ne2k_isa",
    "ne2k_pci",
    "pcnet",
    "rtl8139",
    "virtio",
    "vmxnet3",
];

/// Whether `key` is a VM config key of the modelled schema.
pub fn is_config_key(key: &str) -> bool {
    if PLAIN_KEYS.contains(&key) {
        return true;
    }
    INDEXED.iter().any(|(prefix, max)| {
        key.strip_prefix(prefix)
            .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|n| n <= *max)
    })
}

/// Whether `key` names a disk/drive slot.
pub fn is_drive_key(key: &str) -> bool {
    ["ide", "sata", "scsi", "virtio", "efidisk", "tpmstate", "unused"]
        .iter()
        .any(|p| key.starts_with(p) && key[p.len()..].chars().all(|c| c.is_ascii_digit()))
        && key != "scsihw"
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

/// Split a property string into (key, value) pairs; a bare first item gets key `""`.
pub fn split_props(s: &str) -> Vec<(String, String)> {
    s.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.trim().to_string(), v.trim().to_string()),
            None => (String::new(), p.trim().to_string()),
        })
        .collect()
}

/// Get one property of a property string.
pub fn prop(s: &str, key: &str) -> Option<String> {
    split_props(s).into_iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

fn valid_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 6 && parts.iter().all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
}

fn normalize_net(key: &str, value: &str, new_mac: &mut dyn FnMut() -> String) -> Result<String, String> {
    let mut model: Option<(String, String)> = None;
    let mut rest = Vec::new();
    for (k, v) in split_props(value) {
        if k.is_empty() && NIC_MODELS.contains(&v.as_str()) {
            model = Some((v, new_mac()));
        } else if NIC_MODELS.contains(&k.as_str()) {
            if !valid_mac(&v) {
                return Err(fmt_err(key, &format!("macaddr: value does not look like a valid MAC address: {v}")));
            }
            model = Some((k, v.to_uppercase()));
        } else if k == "model" {
            if !NIC_MODELS.contains(&v.as_str()) {
                return Err(fmt_err(key, &format!("model: value '{v}' does not have a value in the enumeration")));
            }
            model = Some((v, new_mac()));
        } else if k == "macaddr" {
            if !valid_mac(&v) {
                return Err(fmt_err(key, &format!("macaddr: value does not look like a valid MAC address: {v}")));
            }
            if let Some((_, mac)) = model.as_mut() {
                *mac = v.to_uppercase();
            }
        } else if k.is_empty() {
            return Err(fmt_err(key, &format!("model: value '{v}' does not have a value in the enumeration")));
        } else if ["bridge", "tag", "firewall", "link_down", "mtu", "queues", "rate", "trunks"].contains(&k.as_str()) {
            if k == "tag" {
                int_in(&v, 1, 4094).map_err(|e| fmt_err(key, &format!("tag: {e}")))?;
            }
            rest.push(format!("{k}={v}"));
        } else {
            return Err(fmt_err(key, &format!("{k}: property is not defined in schema")));
        }
    }
    let Some((model, mac)) = model else {
        return Err(fmt_err(key, "model: property is missing and it is not optional"));
    };
    let mut out = format!("{model}={mac}");
    for r in rest {
        out.push(',');
        out.push_str(&r);
    }
    Ok(out)
}

fn valid_cidr4(s: &str) -> bool {
    let Some((ip, len)) = s.split_once('/') else {
        return false;
    };
    ip.parse::<Ipv4Addr>().is_ok() && len.parse::<u8>().is_ok_and(|l| l <= 32)
}

fn valid_cidr6(s: &str) -> bool {
    let Some((ip, len)) = s.split_once('/') else {
        return false;
    };
    ip.parse::<std::net::Ipv6Addr>().is_ok() && len.parse::<u8>().is_ok_and(|l| l <= 128)
}

fn normalize_ipconfig(key: &str, value: &str) -> Result<String, String> {
    for (k, v) in split_props(value) {
        match k.as_str() {
            "ip" if v != "dhcp" && !valid_cidr4(&v) => {
                return Err(fmt_err(
                    key,
                    &format!("ip: invalid format - value does not look like a valid IPv4 network configuration: {v}"),
                ));
            }
            "ip6" if !["dhcp", "auto"].contains(&v.as_str()) && !valid_cidr6(&v) => {
                return Err(fmt_err(
                    key,
                    &format!("ip6: invalid format - value does not look like a valid IPv6 network configuration: {v}"),
                ));
            }
            "gw" if v.parse::<Ipv4Addr>().is_err() => {
                return Err(fmt_err(
                    key,
                    &format!("gw: invalid format - value does not look like a valid IPv4 address: {v}"),
                ));
            }
            "gw6" if v.parse::<std::net::Ipv6Addr>().is_err() => {
                return Err(fmt_err(
                    key,
                    &format!("gw6: invalid format - value does not look like a valid IPv6 address: {v}"),
                ));
            }
            "ip" | "ip6" | "gw" | "gw6" => {}
            "" => return Err(fmt_err(key, &format!("ip: invalid format - {v}"))),
            other => return Err(fmt_err(key, &format!("{other}: property is not defined in schema"))),
        }
    }
    Ok(value.to_string())
}

fn normalize_cicustom(key: &str, value: &str) -> Result<String, String> {
    for (k, v) in split_props(value) {
        if !["user", "network", "meta", "vendor"].contains(&k.as_str()) {
            return Err(fmt_err(key, &format!("{k}: property is not defined in schema")));
        }
        let ok = v.split_once(':').is_some_and(|(s, p)| !s.is_empty() && !p.is_empty());
        if !ok {
            return Err(fmt_err(key, &format!("{k}: unable to parse volume ID '{v}'")));
        }
    }
    Ok(value.to_string())
}

/// pve-common's `dns-name` failure text (`PVE::JSONSchema::pve_verify_dns_name`).
pub const NOT_A_DNS_NAME: &str = "value does not look like a valid DNS name";

/// pve-common's `dns-name` format (`PVE::JSONSchema::pve_verify_dns_name`, pve-common
/// f665029, src/PVE/JSONSchema.pm:675-685): dot-separated labels of letters, digits and
/// `-`, each starting and ending with a letter or digit. The regex sets no length
/// limit (a VM `name` has no `maxLength` either; a container's `hostname` adds 255).
pub fn valid_dns_name(v: &str) -> bool {
    v.split('.').all(|l| {
        !l.is_empty()
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    })
}

/// A `pve-tag-list` as PVE stores it with the default datacenter `tag-style`:
/// split like pve-common's `split_list` (`;`, `,` and whitespace separate; pve-common
/// f665029, src/PVE/ParseUtils.pm:49-58), each tag checked against `$PVE_TAG_RE`
/// (src/PVE/JSONSchema.pm:890-903, else `invalid characters in tag`), then
/// pve-guest-common's `get_unique_tags` (4a8f6cb, src/PVE/GuestHelpers.pm:349-377):
/// sorted case-insensitively, lower-cased, duplicates dropped, joined with `;`.
/// qemu-server calls it on create and on config update (Qemu.pm:1538, 2496),
/// pve-container in `update_pct_config` (src/PVE/LXC/Config.pm:1358).
pub fn unique_tags(value: &str) -> Result<String, String> {
    let tags: Vec<&str> = if value.contains('\0') {
        value.split('\0').collect()
    } else {
        value.split([',', ';', ' ', '\t', '\n', '\r']).filter(|t| !t.is_empty()).collect()
    };
    let tag_ok = |t: &str| {
        let mut cs = t.chars();
        cs.next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            && cs.all(|c| c.is_ascii_alphanumeric() || "_-+.".contains(c))
    };
    if !tags.iter().all(|t| tag_ok(t)) {
        return Err("invalid format - invalid characters in tag".into());
    }
    let mut lower: Vec<String> = tags.iter().map(|t| t.to_lowercase()).collect();
    lower.sort();
    lower.dedup();
    Ok(lower.join(";"))
}

/// `pve_verify_hotplug_features`: `0`, `1` or a list of known features (the parser
/// itself is `api::hotplug::parse`).
fn valid_hotplug(value: &str) -> bool {
    const KNOWN: &[&str] = &["network", "disk", "cpu", "memory", "usb", "cloudinit"];
    matches!(value, "0" | "1")
        || value.split([',', ';', ' ', '\t']).filter(|s| !s.is_empty()).all(|f| KNOWN.contains(&f))
}

/// Validate and normalise `key=value` for VM `vmid`. `new_mac` supplies generated MACs.
pub fn normalize(key: &str, value: &str, new_mac: &mut dyn FnMut() -> String) -> Result<String, String> {
    if !is_config_key(key) {
        return Err(NOT_IN_SCHEMA.to_string());
    }
    match key {
        "cores" | "sockets" => int_in(value, 1, 1024).map(|()| value.to_string()),
        "memory" => {
            let v = value.strip_prefix("current=").unwrap_or(value);
            int_in(v, 16, 1 << 30).map(|()| v.to_string())
        }
        "balloon" => int_in(value, 0, 1 << 30).map(|()| value.to_string()),
        "onboot" | "template" | "protection" | "acpi" | "kvm" | "tablet" | "localtime" | "numa" | "autostart"
        | "freeze" => boolean(value).map(|()| value.to_string()),
        "name" if !valid_dns_name(value) => Err(format!("invalid format - {NOT_A_DNS_NAME}")),
        "tags" => unique_tags(value),
        // `pve-hotplug-features` (qemu-server e6352be src/PVE/QemuServer.pm:1136-1165).
        "hotplug" if valid_hotplug(value) => Ok(value.to_string()),
        "hotplug" => Err("invalid format - unable to parse hotplug option".into()),
        "cicustom" => normalize_cicustom(key, value),
        "citype" => match value {
            "nocloud" | "configdrive2" | "opennebula" => Ok(value.to_string()),
            _ => Err(format!(
                "value '{value}' does not have a value in the enumeration 'configdrive2, nocloud, opennebula'"
            )),
        },
        "nameserver" => {
            if value.split([' ', ',']).filter(|s| !s.is_empty()).all(|s| s.parse::<IpAddr>().is_ok()) {
                Ok(value.to_string())
            } else {
                Err(format!("invalid format - value does not look like a valid IP address: {value}"))
            }
        }
        k if k.starts_with("net") && k != "nameserver" => normalize_net(key, value, new_mac),
        k if k.starts_with("ipconfig") => normalize_ipconfig(key, value),
        _ => Ok(value.to_string()),
    }
}

/// Keys whose values GET config returns as JSON integers (the rest are strings).
pub fn is_integer_key(key: &str) -> bool {
    matches!(
        key,
        "cores"
            | "sockets"
            | "onboot"
            | "template"
            | "protection"
            | "balloon"
            | "acpi"
            | "kvm"
            | "tablet"
            | "numa"
            | "vcpus"
            | "cpuunits"
            | "shares"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac() -> String {
        "BC:24:11:00:00:01".into()
    }

    #[test]
    fn net_without_mac_gets_one_and_pve_formatting() {
        let v = normalize("net0", "virtio,bridge=vmbr0,tag=20", &mut mac).unwrap();
        assert_eq!(v, "virtio=BC:24:11:00:00:01,bridge=vmbr0,tag=20");
        let v = normalize("net0", "model=virtio,bridge=vmbr0", &mut mac).unwrap();
        assert_eq!(v, "virtio=BC:24:11:00:00:01,bridge=vmbr0");
    }

    #[test]
    fn net_without_model_and_bad_cidr_are_rejected() {
        let e = normalize("net0", "bridge=vmbr0", &mut mac).unwrap_err();
        assert!(e.contains("net0.model: property is missing"), "{e}");
        let e = normalize("ipconfig0", "ip=10.0.0.300/24,gw=10.0.0.1", &mut mac).unwrap_err();
        assert!(e.contains("ipconfig0.ip"), "{e}");
        assert!(normalize("ipconfig0", "ip=10.0.0.3/24,gw=10.0.0.1", &mut mac).is_ok());
        assert_eq!(normalize("bogus", "1", &mut mac).unwrap_err(), NOT_IN_SCHEMA);
    }

    /// pve-guest-common 4a8f6cb src/PVE/GuestHelpers.pm:361-366 (sorted by `lc`,
    /// lower-cased, first one kept) over pve-common f665029 src/PVE/ParseUtils.pm:54-57
    /// (`,` `;` and whitespace separate).
    #[test]
    fn tags_are_stored_lowercased_deduplicated_and_sorted_as_pve_does() {
        assert_eq!(normalize("tags", "Web;cradle,web  B-2", &mut mac).unwrap(), "b-2;cradle;web");
        assert_eq!(normalize("tags", "a", &mut mac).unwrap(), "a");
        // JSONSchema.pm:890 `$PVE_TAG_RE`: a letter, digit or `_` first.
        let e = normalize("tags", "ok;-bad", &mut mac).unwrap_err();
        assert_eq!(e, "invalid format - invalid characters in tag");
        assert!(normalize("tags", "a!b", &mut mac).is_err());
    }

    /// pve-common f665029 src/PVE/JSONSchema.pm:678-681: `^(label\.)*label$` with
    /// `label = [a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?`: no length cap.
    #[test]
    fn vm_names_follow_pve_verify_dns_name() {
        for ok in ["web-1", "a", "web.example.net", "1a", &"a".repeat(64), &"b".repeat(300)] {
            assert!(normalize("name", ok, &mut mac).is_ok(), "{ok}");
        }
        for bad in ["web-", "-web", "a..b", "a.", ".a", "a_b", ""] {
            let e = normalize("name", bad, &mut mac).unwrap_err();
            assert_eq!(e, "invalid format - value does not look like a valid DNS name", "{bad}");
        }
    }
}
