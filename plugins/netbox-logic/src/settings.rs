//! The pipeline's settings from the inventory defaults that moved to
//! cradle.toml with the typed capabilities: a value that would now be
//! silently ignored is refused, saying where it lives now.

use crate::Problem;

/// How the MAC is written to NetBox (`netbox_mac_write`, docs/NETBOX.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MacWrite {
    /// By the server's version.
    Auto,
    /// The interface's `mac_address` field.
    Field,
    /// The MACAddress object and `primary_mac_address`.
    Objects,
}

/// `netbox_mac_write`: `auto`, `field` or `objects`.
pub fn mac_write(how: &str) -> Result<MacWrite, Problem> {
    match how {
        "auto" => Ok(MacWrite::Auto),
        "field" => Ok(MacWrite::Field),
        "objects" => Ok(MacWrite::Objects),
        other => Err(Problem::invalid(format!(
            "netbox_mac_write = \"{other}\": write auto, field (the interface's mac_address) or objects (NetBox 4.2+: the MACAddress object)"
        ))),
    }
}

/// `unifi_site`: none or `default`; the site is the DHCP provider's now.
pub fn unifi_site(site: Option<&str>) -> Result<(), Problem> {
    match site {
        None | Some("default") => Ok(()),
        Some(site) => Err(Problem::invalid(format!(
            "unifi_site = \"{site}\": the UniFi site is set in cradle.toml now ([dhcp.NAME] site = \"{site}\"); drop unifi_site from the defaults"
        ))),
    }
}

/// `dns_ptr`: true (the default); whether the PTR is kept is the DNS provider's now.
pub fn dns_ptr(ptr: bool) -> Result<(), Problem> {
    if ptr {
        return Ok(());
    }
    Err(Problem::invalid(
        "dns_ptr = false: whether the PTR is kept is set in cradle.toml now ([dns.NAME] ptr = false); drop dns_ptr from the defaults"
            .to_string(),
    ))
}

/// The fully qualified name of VM `name` in `zone`.
pub fn fqdn(name: &str, zone: &str) -> String {
    format!("{name}.{zone}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Kind;

    #[test]
    fn mac_write_accepts_the_three_ways_and_refuses_others_naming_them() {
        assert_eq!(mac_write("auto"), Ok(MacWrite::Auto));
        assert_eq!(mac_write("field"), Ok(MacWrite::Field));
        assert_eq!(mac_write("objects"), Ok(MacWrite::Objects));
        let p = mac_write("Objects").expect_err("case matters");
        assert_eq!(p.kind, Kind::Invalid);
        assert!(p.message.contains("netbox_mac_write = \"Objects\"") && p.message.contains("auto, field"), "{p}");
    }

    #[test]
    fn unifi_site_other_than_default_is_refused_pointing_at_cradle_toml() {
        assert_eq!(unifi_site(None), Ok(()));
        assert_eq!(unifi_site(Some("default")), Ok(()));
        let p = unifi_site(Some("lab")).expect_err("moved");
        assert!(p.message.contains("[dhcp.NAME] site = \"lab\"") && p.message.contains("drop unifi_site"), "{p}");
    }

    #[test]
    fn dns_ptr_false_is_refused_pointing_at_cradle_toml() {
        assert_eq!(dns_ptr(true), Ok(()));
        let p = dns_ptr(false).expect_err("moved");
        assert!(p.message.contains("[dns.NAME] ptr = false"), "{p}");
    }

    #[test]
    fn the_fqdn_is_the_name_in_the_zone_as_written() {
        assert_eq!(fqdn("web-1", "lab.example"), "web-1.lab.example");
    }
}
