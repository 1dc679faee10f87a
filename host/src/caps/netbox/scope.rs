//! The `netbox` capability's scope: its grant section (`[...grants.netbox]`:
//! [`NetboxGrant`], the endpoint the host talks to and the VM statuses the
//! caller may set), what of a call the grant looks at ([`NetboxCall`]: a read,
//! a MAC write, a status and a journal entry, and the cluster of the VM it
//! touches), and the rules: every call needs the section (its `endpoint` is
//! where the host sends it); a status must be listed in `statuses`; with
//! `clusters`, the VM a call reads or writes (a VM interface's VM for a MAC)
//! must be in a listed cluster. The VM's cluster is NetBox's to tell, so the
//! adapter checks a call twice through [`crate::caps::policy::check`]: before
//! any request with [`NetboxTarget::Unresolved`], and, when the grant lists
//! clusters, again with the VM's cluster once it has read it, before it
//! answers or writes anything. NetBox's own permissions on the endpoint's
//! token decide the rest (a 403 is `denied` with NetBox's message).

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
    /// The clusters (by name) whose VMs a call may read or write; `"*"` any.
    /// Absent: any VM. A VM of no cluster is in none of them.
    #[serde(default)]
    pub clusters: Option<Vec<String>>,
}

impl NetboxGrant {
    /// Whether a VM's cluster must be read and checked before a call on it.
    pub fn scopes_clusters(&self) -> bool {
        self.clusters.is_some()
    }
}

/// The VM a call touches, as far as its cluster is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetboxTarget<'a> {
    /// Not read yet (the check before any request), or a call on no one VM
    /// (an IP address, a listing).
    Unresolved,
    /// VM `id`, of this cluster (none: of no cluster).
    Vm {
        /// The VM's NetBox id, for the message.
        id: u64,
        /// The name of its cluster.
        cluster: Option<&'a str>,
    },
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
    /// The VM it touches.
    pub target: NetboxTarget<'a>,
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
        if let (Some(clusters), NetboxTarget::Vm { id, cluster }) = (&self.clusters, call.target) {
            match cluster {
                Some(c) if list_allows(clusters, c) => {}
                Some(c) => {
                    return Err(format!("VM {id} is in cluster `{c}`, which is not in {origin}.netbox.clusters").into());
                }
                None => {
                    return Err(format!("VM {id} is in no cluster; {origin}.netbox.clusters lists the clusters").into());
                }
            }
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
        Call::Netbox(NetboxCall { op, target: NetboxTarget::Unresolved })
    }

    fn on_vm<'a>(op: NetboxOp<'a>, cluster: Option<&'a str>) -> Call<'a> {
        Call::Netbox(NetboxCall { op, target: NetboxTarget::Vm { id: 7, cluster } })
    }

    #[test]
    fn a_vm_of_a_cluster_not_granted_is_denied() {
        let g: Grants =
            toml::from_str("[netbox]\nendpoint = \"netbox\"\nstatuses = [\"active\"]\nclusters = [\"lab\"]")
                .expect("parse");
        let deny = |c: Call<'_>| check(&g, "workflow.grants", &scope(), &c).expect_err("denied").to_string();
        for op in [NetboxOp::Read, NetboxOp::SetMac, NetboxOp::Journal, NetboxOp::SetStatus("active")] {
            let m = deny(on_vm(op, Some("prod")));
            assert!(m.contains("VM 7 is in cluster `prod`, which is not in workflow.grants.netbox.clusters"), "{m}");
            assert!(deny(on_vm(op, None)).contains("VM 7 is in no cluster"));
            check(&g, "workflow.grants", &scope(), &on_vm(op, Some("lab"))).expect("granted cluster");
            check(&g, "workflow.grants", &scope(), &call(op)).expect("not yet read");
        }
        // Without `clusters` any VM is in scope (the fixture).
        allowed(on_vm(NetboxOp::SetMac, Some("prod")));
        allowed(on_vm(NetboxOp::Read, None));
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
