//! The one permission check every capability call goes through.
//!
//! Every host call, from a plugin or a workflow, reaches [`check`] through
//! [`super::context::CapCtx::guard`], with a [`Call`] (the scope-relevant
//! arguments of that call), the caller's [`Grants`] and the [`RunScope`] of the
//! call (the VMs it is bound to, the cluster's nodes). `check` applies the
//! shared rules here, in this order:
//!
//! 1. the capability must be granted at all (a `[<origin>.<cap>]` section;
//!    `log` always is), else [`Denied`] names the section to add;
//! 2. then the capability's own rules decide, with its grant section and the
//!    [`Caller`] (origin for messages, the run binding, whether the grants are
//!    a built-in plugin's defaults).
//!
//! Each capability's own rules live in its folder, `caps/<cap>/scope.rs`,
//! beside its grant section type, as the [`Grant`] impl of that type (the
//! registry, [`super::registry`], says which grant and call type each
//! capability has and generates the dispatch). The shared pieces every rule
//! reads are here: [`RunScope`], [`ScopedVm`], [`SshLogin`], [`list_allows`],
//! and [`Denied`] with its message format (`<capability>: <scope>`).
//!
//! The check performs no I/O and has no side effects; the guard journals a
//! [`Denied`] and returns it to the plugin as the WIT `denied` error. Every
//! denied case has a test next to the rule that denies it.

use super::{Call, Capability, Grants};
use crate::contract::{CapError, ErrorKind};

/// The VMs and nodes one call (or one workflow run) is bound to.
#[derive(Debug, Clone, Default)]
pub struct RunScope {
    /// The VMs in scope.
    pub vms: Vec<ScopedVm>,
    /// SSH logins of the cluster's nodes (for the `"nodes"` ssh grant): the
    /// configured node address, port and user.
    pub nodes: Vec<SshLogin>,
    /// The calls come from the operator's workflow (trusted code), not from a
    /// plugin. Only the operator may pin or forget host keys of hosts that are
    /// not guests its run owns (cluster nodes above all), and release a lock
    /// that another caller of the run acquired. `false` (the default) is the
    /// strict plugin scope.
    pub operator: bool,
}

/// Where SSH reaches a host: address, port and login user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshLogin {
    /// Address or host name.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Login user.
    pub user: String,
}

impl std::fmt::Display for SshLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}:{}", self.user, self.host, self.port)
    }
}

/// One VM in scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopedVm {
    /// Canonical name.
    pub name: String,
    /// VMID.
    pub vmid: u32,
    /// How SSH reaches it (the inventory's `ansible_host`, `ansible_port`,
    /// user), if known; `None` grants no SSH to it as a guest.
    pub ssh: Option<SshLogin>,
    /// This run's workflow holds the VM's lock: the run owns the VM, so a
    /// plugin may pin (or forget) the host key of this guest.
    pub owned: bool,
    /// The inventory's `vms_terraform_allow_replacement` for the VM: with the
    /// plugin's `terraform.destructive`, the terraform capability's `apply`
    /// may apply a plan that replaces it. Always the run's (the inventory),
    /// never a call's arguments.
    pub allow_replacement: bool,
}

/// A refused call: the capability and the scope that refused it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{capability}: {scope}")]
pub struct Denied {
    /// The capability.
    pub capability: Capability,
    /// What was outside the grant, and which config key governs it.
    pub scope: String,
}

impl From<Denied> for CapError {
    fn from(d: Denied) -> CapError {
        CapError::new(ErrorKind::Denied, d.to_string())
    }
}

/// Who is calling, as a capability's own rules see it.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    /// Where the grants are in cradle.toml (`plugins.direct.grants`), for the
    /// config key a denial names.
    pub origin: &'a str,
    /// The VMs and nodes the call is bound to.
    pub scope: &'a RunScope,
    /// The grants are a built-in plugin's defaults (no `[plugins.NAME]` in
    /// cradle.toml), so a denial says that a section must be written.
    pub builtin_defaults: bool,
}

/// A grant section value serde accepted but the capability cannot use
/// (`proxmox.node_keys: \`x\` is not a node key …`), found once when
/// cradle.toml is read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: `{value}` {problem}")]
pub struct GrantError {
    /// The key below the grants, `section.key` (`ssh.upload_dirs`).
    pub key: &'static str,
    /// The value as written.
    pub value: String,
    /// What is wrong with it, and what to write instead.
    pub problem: String,
}

/// What of a call lies outside a grant, and which config key governs it: the
/// scope of the [`Denied`] [`check`] returns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct OutOfScope(pub String);

impl From<String> for OutOfScope {
    fn from(scope: String) -> OutOfScope {
        OutOfScope(scope)
    }
}

/// A capability's grant section (`[<origin>.<cap>]`) and the rules it
/// enforces; implemented in the capability's `scope.rs`.
pub trait Grant {
    /// The scope-relevant arguments of one call of the capability.
    type Call<'a>;

    /// Check values serde cannot (absolute paths, zone spelling), once when
    /// cradle.toml is read.
    fn validate(&self) -> Result<(), GrantError> {
        Ok(())
    }

    /// Whether `call` is inside this grant.
    fn check(&self, caller: &Caller<'_>, call: &Self::Call<'_>) -> Result<(), OutOfScope>;
}

/// Whether `list` allows `value`: `"*"` allows anything, an empty list nothing.
pub fn list_allows(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

/// Check `call` against `grants` (found at config path `origin`, e.g.
/// `plugins.direct.grants`) and `scope`.
pub fn check(grants: &Grants, origin: &str, scope: &RunScope, call: &Call<'_>) -> Result<(), Denied> {
    let cap = call.capability();
    if !grants.allows(cap) {
        return Err(Denied { capability: cap, scope: format!("not granted (add [{origin}.{cap}] to cradle.toml)") });
    }
    let caller = Caller { origin, scope, builtin_defaults: grants.builtin_defaults };
    grants.check_granted(&caller, call).map_err(|OutOfScope(scope)| Denied {
        capability: cap,
        scope: with_defaults_hint(scope, origin, cap, grants.builtin_defaults),
    })
}

/// A denial under a built-in plugin's default grants names the section to
/// write: there is no `[plugins.NAME]` in cradle.toml to edit, and writing
/// only the one section would drop every other default (a table replaces
/// the built-in's defaults as a whole).
fn with_defaults_hint(scope: String, origin: &str, cap: Capability, builtin_defaults: bool) -> String {
    const HINT: &str = "the built-in plugin's default grants";
    if !builtin_defaults || scope.contains(HINT) {
        return scope;
    }
    let table = origin.strip_suffix(".grants").unwrap_or(origin);
    format!(
        "{scope}; these are {HINT} (cradle.toml has no [{table}]): write [{table}] out with its defaults \
         (`cradle init` prints them) and widen [{origin}.{cap}] there"
    )
}

/// The grants, scope and helpers the capabilities' denied-case tests share
/// (each `scope.rs` tests its rules through [`check`]).
#[cfg(test)]
pub(crate) mod fixture {
    use super::{Call, Grants, RunScope, ScopedVm, SshLogin, check};

    /// Grants of every capability, as `plugins.direct.grants`.
    pub(crate) fn grants() -> Grants {
        toml::from_str(
            r#"
[proxmox]
nodes = ["pve1", "pve2"]
vmids = "100-199"
storages = ["local-lvm"]
templates = ["debian-12", 9001]
[ssh]
hosts = ["guests", "nodes"]
upload_dirs = ["/var/lib/vz/snippets"]
playbooks = ["playbooks"]
[dns]
zones = ["lab.example."]
[dhcp]
networks = ["10.0.10.0/24"]
[post]
projects = [1]
templates = [7]
[lock]
prefixes = ["https://pve:8006|"]
[checkpoint]
[http]
endpoints = ["netbox"]
[netbox]
endpoint = "netbox"
statuses = ["active", "failed"]
"#,
        )
        .expect("grants")
    }

    pub(crate) fn login(user: &str, host: &str, port: u16) -> SshLogin {
        SshLogin { host: host.into(), port, user: user.into() }
    }

    /// One owned guest, `test-0` (VMID 150, `cradle@127.0.10.5:22`), and one
    /// node, `root@127.0.1.1:22`; the strict plugin scope.
    pub(crate) fn scope() -> RunScope {
        RunScope {
            vms: vec![ScopedVm {
                name: "test-0".into(),
                vmid: 150,
                ssh: Some(login("cradle", "127.0.10.5", 22)),
                owned: true,
                allow_replacement: false,
            }],
            nodes: vec![login("root", "127.0.1.1", 22)],
            operator: false,
        }
    }

    /// The denial's message under [`grants`] and [`scope`].
    pub(crate) fn denied(call: Call<'_>) -> String {
        check(&grants(), "plugins.direct.grants", &scope(), &call).expect_err("must be denied").to_string()
    }

    /// Panics unless `call` passes under [`grants`] and [`scope`].
    pub(crate) fn allowed(call: Call<'_>) {
        check(&grants(), "plugins.direct.grants", &scope(), &call).expect("must be allowed");
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::scope;
    use super::*;
    use crate::caps::lock::scope::{LockCall, LockOp};

    #[test]
    fn an_ungranted_capability_is_denied_naming_the_section_to_add() {
        let call = Call::Lock(LockCall { key: "k", op: LockOp::Acquire });
        let msg = check(&Grants::default(), "plugins.x.grants", &scope(), &call).expect_err("denied").to_string();
        assert_eq!(msg, "lock: not granted (add [plugins.x.grants.lock] to cradle.toml)");
    }

    #[test]
    fn a_denial_under_the_built_in_netbox_defaults_names_the_table_and_section_to_write() {
        use crate::caps::dhcp::scope::DhcpCall;
        use crate::caps::dns::scope::DnsCall;
        let netbox = crate::config::PluginConfig::builtin(&crate::builtin::catalogue::NETBOX);
        let origin = "plugins.netbox.grants";
        let dhcp = Call::Dhcp(DhcpCall { network: "10.0.10.0/24", ip: Some("10.0.10.5") });
        let msg = check(&netbox.grants, origin, &scope(), &dhcp).expect_err("no network by default").to_string();
        assert!(msg.contains("network `10.0.10.0/24` is not inside plugins.netbox.grants.dhcp.networks"), "{msg}");
        assert!(
            msg.contains("cradle.toml has no [plugins.netbox]")
                && msg.contains("widen [plugins.netbox.grants.dhcp] there")
                && msg.contains("`cradle init`"),
            "{msg}"
        );
        let dns = Call::Dns(DnsCall { zone: "lab.example", name: "a.lab.example" });
        let msg = check(&netbox.grants, origin, &scope(), &dns).expect_err("no zone by default").to_string();
        assert!(msg.contains("widen [plugins.netbox.grants.dns] there"), "{msg}");
        let mut written = netbox.grants.clone();
        written.builtin_defaults = false;
        let msg = check(&written, origin, &scope(), &dns).expect_err("still no zone").to_string();
        assert!(!msg.contains("cradle init"), "a written table has a section to edit already: {msg}");
    }
}
