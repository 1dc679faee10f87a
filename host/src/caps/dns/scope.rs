//! The `dns` capability's scope: its grant section (`[...grants.dns]`:
//! [`DnsGrant`], the zones), what of a call the grant looks at ([`DnsCall`]:
//! zone and owner name), and the rule that compares the two: the zone must be
//! granted and the name must lie inside it (compared without the trailing dot
//! and case). Checked through [`crate::caps::policy::check`] like every call;
//! the provider checks the same again against its own `[dns.NAME]` zones.

use serde::Deserialize;

use crate::caps::policy::{Caller, Grant, GrantError, OutOfScope};

/// `[...grants.dns]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnsGrant {
    /// Zones records may be changed in (`lab.example.`); names must be inside one.
    #[serde(default)]
    pub zones: Vec<String>,
}

/// The scope-relevant arguments of a DNS change.
#[derive(Debug, Clone, Copy)]
pub struct DnsCall<'a> {
    /// The zone.
    pub zone: &'a str,
    /// The owner name.
    pub name: &'a str,
}

impl Grant for DnsGrant {
    type Call<'a> = DnsCall<'a>;

    fn validate(&self) -> Result<(), GrantError> {
        for zone in &self.zones {
            if zone.is_empty() || zone.contains(char::is_whitespace) {
                return Err(GrantError { key: "dns.zones", value: zone.clone(), problem: "is not a zone name".into() });
            }
        }
        Ok(())
    }

    fn check(&self, caller: &Caller<'_>, call: &DnsCall<'_>) -> Result<(), OutOfScope> {
        let DnsCall { zone, name } = *call;
        let origin = caller.origin;
        let zone_n = normalize_zone(zone);
        if !self.zones.iter().any(|z| normalize_zone(z) == zone_n) {
            return Err(format!("zone `{zone}` is not in {origin}.dns.zones").into());
        }
        let name_n = normalize_zone(name);
        if !(name_n == zone_n || name_n.ends_with(&format!(".{zone_n}"))) {
            return Err(format!("name `{name}` is not inside zone `{zone}`").into());
        }
        Ok(())
    }
}

fn normalize_zone(z: &str) -> String {
    z.trim_end_matches('.').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::Call;
    use crate::caps::policy::fixture::{allowed, denied};

    #[test]
    fn dns_outside_the_granted_zones_is_denied() {
        assert!(
            denied(Call::Dns(DnsCall { zone: "corp.example.", name: "a.corp.example." }))
                .contains("zone `corp.example.`")
        );
        assert!(denied(Call::Dns(DnsCall { zone: "lab.example", name: "evil.other." })).contains("not inside zone"));
        allowed(Call::Dns(DnsCall { zone: "LAB.example", name: "test-0.lab.example." }));
    }
}
