//! The `netbox` capability's scope: its grant section (`[...grants.netbox]`:
//! [`NetboxGrant`], the endpoint the host talks to and the VM statuses the
//! caller may set), what of a call the grant looks at ([`NetboxCall`]: a read,
//! a MAC write, a status and a journal entry), and the rules: every call needs
//! the section (its `endpoint` is where the host sends it); a status must be
//! listed in `statuses`. Reads, MAC writes and journal entries go to the
//! granted endpoint only; NetBox's own permissions on the endpoint's token
//! decide the rest (a 403 is `denied` with NetBox's message). Checked through
//! [`crate::caps::policy::check`] like every call.

use serde::Deserialize;

use crate::caps::policy::{Caller, Grant, GrantError, OutOfScope, list_allows};

/// `[...grants.netbox]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetboxGrant {
    /// The `[endpoints.NAME]` the host sends the calls to, with its token.
    pub endpoint: String,
    /// The VM status values (`active`, `failed`) `set-status` may set; `"*"`
    /// any. Empty (the default): no status change.
    #[serde(default)]
    pub statuses: Vec<String>,
}

/// What a NetBox call does, as far as the grant cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetboxOp<'a> {
    /// A read (VM, IP address, interfaces, a VM listing).
    Read,
    /// A MAC write on a VM interface.
    SetMac,
    /// A journal entry on a VM.
    Journal,
    /// A VM's status set to this value.
    SetStatus(&'a str),
}

/// The scope-relevant arguments of a NetBox call.
#[derive(Debug, Clone, Copy)]
pub struct NetboxCall<'a> {
    /// What it does.
    pub op: NetboxOp<'a>,
}

impl Grant for NetboxGrant {
    type Call<'a> = NetboxCall<'a>;

    fn validate(&self) -> Result<(), GrantError> {
        if self.endpoint.trim().is_empty() {
            return Err(GrantError {
                key: "netbox.endpoint",
                value: self.endpoint.clone(),
                problem: "must name an [endpoints.NAME]".into(),
            });
        }
        for status in &self.statuses {
            if status.is_empty()
                || !status.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '*')
            {
                return Err(GrantError {
                    key: "netbox.statuses",
                    value: status.clone(),
                    problem: "is not a NetBox status value (`active`, `failed`, ...)".into(),
                });
            }
        }
        Ok(())
    }

    fn check(&self, caller: &Caller<'_>, call: &NetboxCall<'_>) -> Result<(), OutOfScope> {
        let origin = caller.origin;
        if let NetboxOp::SetStatus(status) = call.op
            && !list_allows(&self.statuses, status)
        {
            return Err(format!("VM status `{status}` is not in {origin}.netbox.statuses").into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::policy::fixture::{allowed, denied, scope};
    use crate::caps::policy::{Grant, check};
    use crate::caps::{Call, Grants};

    fn call(op: NetboxOp<'_>) -> Call<'_> {
        Call::Netbox(NetboxCall { op })
    }

    #[test]
    fn netbox_without_a_grant_is_denied_naming_the_section() {
        let mut g = crate::caps::policy::fixture::grants();
        g.netbox = None;
        for op in [NetboxOp::Read, NetboxOp::SetMac, NetboxOp::Journal, NetboxOp::SetStatus("active")] {
            let m = check(&g, "workflow.grants", &scope(), &call(op)).expect_err("no grant").to_string();
            assert_eq!(m, "netbox: not granted (add [workflow.grants.netbox] to cradle.toml)");
        }
    }

    #[test]
    fn a_status_not_in_the_grant_is_denied() {
        // The fixture grants `statuses = ["active", "failed"]`.
        let m = denied(call(NetboxOp::SetStatus("decommissioning")));
        assert!(m.contains("VM status `decommissioning` is not in plugins.direct.grants.netbox.statuses"), "{m}");
        allowed(call(NetboxOp::SetStatus("active")));
        allowed(call(NetboxOp::SetStatus("failed")));
        allowed(call(NetboxOp::Read));
        allowed(call(NetboxOp::SetMac));
        allowed(call(NetboxOp::Journal));
    }

    #[test]
    fn a_grant_without_statuses_sets_none() {
        let g: Grants = toml::from_str("[netbox]\nendpoint = \"netbox\"").expect("parse");
        let m = check(&g, "workflow.grants", &scope(), &call(NetboxOp::SetStatus("active"))).expect_err("none");
        assert!(m.to_string().contains("is not in workflow.grants.netbox.statuses"), "{m}");
    }

    #[test]
    fn a_grant_without_an_endpoint_or_with_a_bad_status_is_refused_when_read() {
        assert!(toml::from_str::<NetboxGrant>("statuses = [\"active\"]").is_err(), "endpoint is required");
        let g: NetboxGrant = toml::from_str("endpoint = \" \"").expect("parse");
        assert_eq!(g.validate().expect_err("blank").key, "netbox.endpoint");
        let g: NetboxGrant = toml::from_str("endpoint = \"netbox\"\nstatuses = [\"act ive\"]").expect("parse");
        assert_eq!(g.validate().expect_err("space").key, "netbox.statuses");
    }
}
