//! The one permission check every capability call goes through.
//!
//! [`check`] compares a [`Call`] (the scope-relevant arguments of one host call)
//! with the [`Grants`] of the caller and the [`RunScope`] of the call (the VMs
//! the call is bound to, the cluster's nodes). It performs no I/O and has no side
//! effects; the caller journals a [`Denied`] and returns it to the plugin as the
//! WIT `denied` error. Every denied case has a test below.

use std::path::{Component, Path};

use super::Capability;
use super::grants::{Grants, ProxmoxGrant, TemplateRef, list_allows};
use super::proxmox::config_scope::{ConfigScope, Touch, node_key};
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
}

/// What an SSH call does, as far as the grant is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SshAction<'a> {
    /// Connect and run a command (`exec`, `wait-for`).
    Connect,
    /// Write the remote file at this path.
    Upload(&'a str),
    /// Pin or forget the host key of `host:port` in cradle's known_hosts.
    HostKey,
}

/// What a lock call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockOp {
    /// Take the key.
    Acquire,
    /// Release the key; `acquired_by_caller`: this caller (the workflow, or
    /// this plugin) holds an acquisition of it in this run.
    Release {
        /// Whether the caller itself acquired the key in this run.
        acquired_by_caller: bool,
    },
    /// Read who holds the key.
    Holder,
}

/// The scope-relevant arguments of one host call.
#[derive(Debug, Clone)]
pub enum Call<'a> {
    /// A Proxmox API call.
    Proxmox(ProxmoxCall<'a>),
    /// An SSH call.
    Ssh {
        /// The host connected to.
        host: &'a str,
        /// The port.
        port: u16,
        /// The login user; `None` for host-key calls, which log in as nobody.
        user: Option<&'a str>,
        /// What the call does.
        action: SshAction<'a>,
    },
    /// A DNS change.
    Dns {
        /// The zone.
        zone: &'a str,
        /// The owner name.
        name: &'a str,
    },
    /// A lock operation.
    Lock {
        /// The key.
        key: &'a str,
        /// What is done with it.
        op: LockOp,
    },
    /// A checkpoint operation.
    Checkpoint {
        /// The VM the checkpoint belongs to.
        vm_name: &'a str,
    },
    /// The VMIDs reserved by this control node's creation records (VMIDs
    /// only; the records' keys never leave the host). Part of `checkpoint`.
    Reservations,
    /// A terraform call.
    Terraform {
        /// The module directory name under the module root.
        module: &'a str,
    },
    /// An outbound HTTP request.
    Http {
        /// The endpoint alias.
        endpoint: &'a str,
    },
    /// A log event (always allowed).
    Log,
}

/// The scope-relevant arguments of a Proxmox call.
#[derive(Debug, Clone, Default)]
pub struct ProxmoxCall<'a> {
    /// Node named by the call.
    pub node: Option<&'a str>,
    /// A second node (migration target, clone target).
    pub target_node: Option<&'a str>,
    /// VMID touched.
    pub vmid: Option<u32>,
    /// Storage named by the call.
    pub storage: Option<&'a str>,
    /// Template cloned: VMID and, when known, its name.
    pub template: Option<(u32, Option<&'a str>)>,
    /// Whether the call destroys or hard-stops something.
    pub destructive: bool,
    /// What a `set-config` call's values touch (every storage, volume,
    /// snippet, node key and deleted disk), for the VM `vmid`.
    pub config: Option<&'a ConfigScope>,
    /// An HA rule written: the members it will hold and those it holds now.
    pub ha_rule: Option<HaRuleScope<'a>>,
}

/// The scope of writing an HA rule: a rewrite takes VMs out of the rule as
/// well as into it, so both sets must be inside the grant.
#[derive(Debug, Clone, Default)]
pub struct HaRuleScope<'a> {
    /// The rule id.
    pub rule: &'a str,
    /// The VMIDs the rule will hold.
    pub new_members: Vec<u32>,
    /// The VMIDs the rule holds now (empty for a new rule).
    pub current_members: Vec<u32>,
    /// The nodes the rule will name.
    pub nodes: Vec<&'a str>,
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

impl Call<'_> {
    /// The capability this call belongs to.
    pub fn capability(&self) -> Capability {
        match self {
            Call::Proxmox(_) => Capability::Proxmox,
            Call::Ssh { .. } => Capability::Ssh,
            Call::Dns { .. } => Capability::Dns,
            Call::Lock { .. } => Capability::Lock,
            Call::Checkpoint { .. } | Call::Reservations => Capability::Checkpoint,
            Call::Terraform { .. } => Capability::Terraform,
            Call::Http { .. } => Capability::Http,
            Call::Log => Capability::Log,
        }
    }
}

/// Check `call` against `grants` (found at config path `origin`, e.g.
/// `plugins.direct.grants`) and `scope`.
pub fn check(grants: &Grants, origin: &str, scope: &RunScope, call: &Call<'_>) -> Result<(), Denied> {
    let cap = call.capability();
    let deny = |scope: String| Err(Denied { capability: cap, scope });
    if !grants.allows(cap) {
        return deny(format!("not granted (add [{origin}.{cap}] to cradle.toml)"));
    }
    match call {
        Call::Log => Ok(()),
        Call::Proxmox(p) => check_proxmox(grants, origin, scope, p).map_err(|scope| Denied { capability: cap, scope }),
        Call::Ssh { host, port, user, action } => {
            let Some(g) = &grants.ssh else { return deny(String::new()) };
            check_ssh(g, origin, scope, host, *port, *user, *action).map_err(|scope| Denied { capability: cap, scope })
        }
        Call::Dns { zone, name } => {
            let Some(g) = &grants.dns else { return deny(String::new()) };
            let zone_n = normalize_zone(zone);
            if !g.zones.iter().any(|z| normalize_zone(z) == zone_n) {
                return deny(format!("zone `{zone}` is not in {origin}.dns.zones"));
            }
            let name_n = normalize_zone(name);
            if !(name_n == zone_n || name_n.ends_with(&format!(".{zone_n}"))) {
                return deny(format!("name `{name}` is not inside zone `{zone}`"));
            }
            Ok(())
        }
        Call::Lock { key, op } => {
            let Some(g) = &grants.lock else { return deny(String::new()) };
            if !g.prefixes.iter().any(|p| p == "*" || key.starts_with(p.as_str())) {
                return deny(format!("key `{key}` does not start with a prefix in {origin}.lock.prefixes"));
            }
            if *op == (LockOp::Release { acquired_by_caller: false }) && !scope.operator {
                return deny(format!(
                    "release of `{key}`: this plugin did not acquire it in this run (a plugin may release only \
                     locks it acquired; the workflow's lock belongs to the workflow)"
                ));
            }
            Ok(())
        }
        Call::Checkpoint { vm_name } => {
            if !scope.vms.iter().any(|vm| vm.name == *vm_name) {
                return deny(format!("VM `{vm_name}` is not a VM of this call (checkpoints are per VM)"));
            }
            Ok(())
        }
        // Granted with the capability: VMID allocation must see every reservation.
        Call::Reservations => Ok(()),
        Call::Terraform { module } => {
            let plain = !module.is_empty()
                && Path::new(module).components().all(|c| matches!(c, Component::Normal(_)))
                && !module.contains('/');
            if !plain {
                return deny(format!(
                    "module `{module}` must be a directory name under {origin}.terraform.module_root"
                ));
            }
            Ok(())
        }
        Call::Http { endpoint } => {
            let Some(g) = &grants.http else { return deny(String::new()) };
            if !g.endpoints.iter().any(|e| e == endpoint) {
                return deny(format!("endpoint `{endpoint}` is not in {origin}.http.endpoints"));
            }
            Ok(())
        }
    }
}

/// A `[user@]host[:port]` entry of `ssh.hosts`: a missing port is 22, a
/// missing user matches any user.
fn literal_allows(entry: &str, host: &str, port: u16, user: Option<&str>) -> bool {
    let (want_user, rest) = match entry.split_once('@') {
        Some((u, r)) => (Some(u), r),
        None => (None, entry),
    };
    // `host:port`, unless the host is an IPv6 address (several colons; write
    // `[addr]:port` for one with a port).
    let (want_host, want_port) = if let Some(inner) = rest.strip_prefix('[') {
        match inner.split_once(']') {
            Some((h, p)) => (h, p.strip_prefix(':').and_then(|p| p.parse::<u16>().ok()).unwrap_or(22)),
            None => return false,
        }
    } else {
        match rest.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => match p.parse::<u16>() {
                Ok(p) => (h, p),
                Err(_) => return false,
            },
            _ => (rest, 22),
        }
    };
    want_host == host && want_port == port && (want_user.is_none() || user.is_none() || want_user == user)
}

/// Whether `login` is `host:port` (and `user`, when the call logs in).
fn login_matches(login: &SshLogin, host: &str, port: u16, user: Option<&str>) -> bool {
    login.host == host && login.port == port && user.is_none_or(|u| u == login.user)
}

fn check_ssh(
    g: &super::grants::SshGrant,
    origin: &str,
    scope: &RunScope,
    host: &str,
    port: u16,
    user: Option<&str>,
    action: SshAction<'_>,
) -> Result<(), String> {
    let shown = match user {
        Some(u) => format!("{u}@{host}:{port}"),
        None => format!("{host}:{port}"),
    };
    if action == SshAction::HostKey && !scope.operator {
        // Node keys are what every run of every environment trusts: only the
        // operator (cradle.toml, the workflows) may change them. A plugin may
        // pin only the key of a guest its run owns.
        if scope.nodes.iter().any(|n| n.host == host) {
            return Err(format!(
                "host-key trust of `{host}` is operator-only: it is a cluster node (a plugin may pin only the keys \
                 of guests its run owns)"
            ));
        }
        let guest = scope.vms.iter().find(|vm| vm.ssh.as_ref().is_some_and(|l| login_matches(l, host, port, None)));
        match guest {
            Some(vm) if !vm.owned => {
                return Err(format!(
                    "host-key trust of `{shown}` (guest {}) is denied: this run does not hold the VM's lock, so it \
                     does not own the guest",
                    vm.name
                ));
            }
            Some(_) if g.hosts.iter().any(|h| h == "guests" || h == "*") => return Ok(()),
            _ => {
                return Err(format!(
                    "host-key trust of `{shown}` is operator-only: it is not a guest of this call in \
                     {origin}.ssh.hosts (a plugin may pin only the keys of guests its run owns)"
                ));
            }
        }
    }
    let allowed = g.hosts.iter().any(|h| match h.as_str() {
        "*" => true,
        "guests" => scope.vms.iter().any(|vm| vm.ssh.as_ref().is_some_and(|l| login_matches(l, host, port, user))),
        "nodes" => scope.nodes.iter().any(|n| login_matches(n, host, port, user)),
        literal => literal_allows(literal, host, port, user),
    });
    if !allowed {
        // Name what the grant does allow for this address, if anything.
        let same_host: Vec<String> = g
            .hosts
            .iter()
            .flat_map(|h| match h.as_str() {
                "guests" => scope
                    .vms
                    .iter()
                    .filter_map(|vm| {
                        vm.ssh.as_ref().filter(|l| l.host == host).map(|l| format!("guest {} as {l}", vm.name))
                    })
                    .collect::<Vec<_>>(),
                "nodes" => scope.nodes.iter().filter(|n| n.host == host).map(|n| format!("node as {n}")).collect(),
                _ => Vec::new(),
            })
            .collect();
        if !same_host.is_empty() {
            return Err(format!(
                "`{shown}` is not a granted login: {origin}.ssh.hosts allows {host} only as the {} (user and port \
                 come from the inventory for guests and from the cluster's node_ssh for nodes)",
                same_host.join(", ")
            ));
        }
        return Err(format!(
            "host `{shown}` is not one of this call's guests or nodes, nor listed in {origin}.ssh.hosts"
        ));
    }
    if let SshAction::Upload(path) = action
        && !inside_any(path, &g.upload_dirs)
    {
        return Err(format!(
            "upload to `{path}` is outside {origin}.ssh.upload_dirs ({})",
            g.upload_dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
        ));
    }
    Ok(())
}

/// The granted upload directory `path` lies in (the deepest, if several
/// nest), for the on-node check that the directory really resolves there.
pub fn upload_dir_of<'d>(path: &str, dirs: &'d [std::path::PathBuf]) -> Option<&'d Path> {
    let p = Path::new(path);
    dirs.iter()
        .filter(|d| p.starts_with(d) && p != d.as_path())
        .max_by_key(|d| d.components().count())
        .map(|d| d.as_path())
}

fn check_proxmox(grants: &Grants, origin: &str, scope: &RunScope, p: &ProxmoxCall<'_>) -> Result<(), String> {
    let Some(g) = &grants.proxmox else { return Err(String::new()) };
    let vmids_hint = || format!("{origin}.proxmox.vmids = \"{}\"", g.vmids);
    for node in [p.node, p.target_node].into_iter().flatten() {
        if !list_allows(&g.nodes, node) {
            return Err(format!("node `{node}` is not in {origin}.proxmox.nodes"));
        }
    }
    if let Some(vmid) = p.vmid
        && !g.vmids.contains(vmid)
    {
        return Err(format!("vmid {vmid} is outside {}", vmids_hint()));
    }
    if let Some(storage) = p.storage
        && !list_allows(&g.storages, storage)
    {
        return Err(format!("storage `{storage}` is not in {origin}.proxmox.storages"));
    }
    if let Some((vmid, name)) = p.template {
        let ok = g.templates.iter().any(|t| match t {
            TemplateRef::Vmid(v) => *v == vmid,
            TemplateRef::Name(n) => n == "*" || Some(n.as_str()) == name,
        });
        if !ok {
            let label = name.map(|n| format!("`{n}` ({vmid})")).unwrap_or_else(|| vmid.to_string());
            return Err(format!("template {label} is not in {origin}.proxmox.templates"));
        }
    }
    if let Some(rule) = &p.ha_rule {
        let id = rule.rule;
        for vmid in &rule.new_members {
            if !g.vmids.contains(*vmid) {
                return Err(format!("HA rule `{id}` would hold vm:{vmid}, outside {}", vmids_hint()));
            }
        }
        for vmid in &rule.current_members {
            if !g.vmids.contains(*vmid) {
                return Err(format!(
                    "HA rule `{id}` currently holds vm:{vmid}, outside {}: a rule holding VMs outside the grant \
                     cannot be rewritten",
                    vmids_hint()
                ));
            }
        }
        for node in &rule.nodes {
            if !list_allows(&g.nodes, node) {
                return Err(format!("HA rule `{id}` names node `{node}`, which is not in {origin}.proxmox.nodes"));
            }
        }
    }
    if let Some(config) = p.config {
        check_config(g, grants, origin, scope, p.vmid, config)?;
    }
    if p.destructive && !g.destructive {
        return Err(format!("destructive calls are not granted ({})", destructive_hint(grants, origin)));
    }
    Ok(())
}

/// How to grant destructive calls; the built-in defaults have no section to edit.
fn destructive_hint(grants: &Grants, origin: &str) -> String {
    if grants.builtin_defaults {
        format!(
            "set {origin}.proxmox.destructive = true; these are the built-in plugin's default grants, which \
             include it only on a `kind = \"sim\"` cluster: write the section out (`cradle init` shows the \
             defaults) and add destructive = true"
        )
    } else {
        format!("set {origin}.proxmox.destructive = true")
    }
}

/// Every storage, volume, snippet and node key a `set-config` names.
fn check_config(
    g: &ProxmoxGrant,
    grants: &Grants,
    origin: &str,
    scope: &RunScope,
    vmid: Option<u32>,
    config: &ConfigScope,
) -> Result<(), String> {
    let this = vmid.map(|v| v.to_string()).unwrap_or_else(|| "?".into());
    for touch in &config.touches {
        match touch {
            Touch::Storage { key, storage } => {
                if !list_allows(&g.storages, storage) {
                    return Err(format!(
                        "key `{key}` names storage `{storage}`, which is not in {origin}.proxmox.storages"
                    ));
                }
            }
            Touch::Volume { key, volid, storage, owner, bare_base } => {
                if *bare_base {
                    return Err(format!(
                        "key `{key}` attaches `{volid}`, a template's base disk; a base disk may appear only as \
                         this VM's own linked-clone base (`base-N-disk-M/vm-{this}-disk-K`)"
                    ));
                }
                if !g.vmids.contains(*owner) {
                    return Err(format!(
                        "key `{key}` attaches `{volid}`, a volume of VMID {owner}, outside {origin}.proxmox.vmids = \"{}\"",
                        g.vmids
                    ));
                }
                if !list_allows(&g.storages, storage) {
                    return Err(format!(
                        "key `{key}` names storage `{storage}`, which is not in {origin}.proxmox.storages"
                    ));
                }
            }
            Touch::Snippet { key, part, volid, storage, file } => {
                if !list_allows(&g.storages, storage) {
                    return Err(format!(
                        "key `{key}` ({part}) names storage `{storage}`, which is not in {origin}.proxmox.storages"
                    ));
                }
                let Some(vm) = scope.vms.iter().find(|v| Some(v.vmid) == vmid) else {
                    return Err(format!(
                        "key `{key}` ({part}) names snippet `{volid}`, but VMID {this} is not a VM of this call, so \
                         its snippets are unknown"
                    ));
                };
                let Ok(names) = crate::cloudinit::snippet_names(&vm.name) else {
                    return Err(format!(
                        "key `{key}` ({part}) names snippet `{volid}`, but `{}` (VMID {this}) is not a VM name \
                         snippets can be named after",
                        vm.name
                    ));
                };
                let own = [(&names.user, "user"), (&names.network, "network"), (&names.meta, "meta")];
                if !own.iter().any(|(n, p)| *n == file && p == part) {
                    return Err(format!(
                        "key `{key}` ({part}) names snippet `{volid}`, which is not this VM's: {} may use only \
                         {}, {} and {} as user, network and meta",
                        names.vm, names.user, names.network, names.meta
                    ));
                }
            }
            Touch::NodeKey { key } => {
                let base = node_key(key).unwrap_or(key.as_str());
                if !g.node_keys.iter().any(|k| k == base) {
                    return Err(format!(
                        "key `{key}` runs code on the node or passes a host resource to the guest; it is refused \
                         unless {origin}.proxmox.node_keys lists \"{base}\""
                    ));
                }
            }
            Touch::Unattributable { key, value, why } => {
                return Err(format!(
                    "key `{key}` names `{value}`, which is {why}; only volumes of VMs in {origin}.proxmox.vmids on \
                     granted storages may be attached"
                ));
            }
            Touch::DeletesDisk { key, holds } => {
                if !g.destructive {
                    return Err(format!(
                        "deleting `{key}` (it holds {holds}) removes a disk from VM {this}: destructive calls are not \
                         granted ({})",
                        destructive_hint(grants, origin)
                    ));
                }
            }
        }
    }
    Ok(())
}

fn normalize_zone(z: &str) -> String {
    z.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether `path` (absolute, no `..`) lies inside one of `dirs`.
fn inside_any(path: &str, dirs: &[std::path::PathBuf]) -> bool {
    let p = Path::new(path);
    if !p.is_absolute() || p.components().any(|c| matches!(c, Component::ParentDir | Component::CurDir)) {
        return false;
    }
    dirs.iter().any(|d| p.starts_with(d) && p != d.as_path())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants() -> Grants {
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
[dns]
zones = ["lab.example."]
[lock]
prefixes = ["https://pve:8006|"]
[checkpoint]
[http]
endpoints = ["netbox"]
"#,
        )
        .expect("grants")
    }

    fn login(user: &str, host: &str, port: u16) -> SshLogin {
        SshLogin { host: host.into(), port, user: user.into() }
    }

    fn scope() -> RunScope {
        RunScope {
            vms: vec![ScopedVm {
                name: "test-0".into(),
                vmid: 150,
                ssh: Some(login("cradle", "127.0.10.5", 22)),
                owned: true,
            }],
            nodes: vec![login("root", "127.0.1.1", 22)],
            operator: false,
        }
    }

    fn ssh<'a>(user: &'a str, host: &'a str, port: u16) -> Call<'a> {
        Call::Ssh { host, port, user: Some(user), action: SshAction::Connect }
    }

    fn upload<'a>(host: &'a str, path: &'a str) -> Call<'a> {
        Call::Ssh { host, port: 22, user: Some("root"), action: SshAction::Upload(path) }
    }

    fn host_key(host: &str, port: u16) -> Call<'_> {
        Call::Ssh { host, port, user: None, action: SshAction::HostKey }
    }

    fn release(key: &str, acquired_by_caller: bool) -> Call<'_> {
        Call::Lock { key, op: LockOp::Release { acquired_by_caller } }
    }

    fn denied(call: Call<'_>) -> String {
        check(&grants(), "plugins.direct.grants", &scope(), &call).expect_err("must be denied").to_string()
    }

    fn allowed(call: Call<'_>) {
        check(&grants(), "plugins.direct.grants", &scope(), &call).expect("must be allowed");
    }

    #[test]
    fn an_ungranted_capability_is_denied_naming_the_section_to_add() {
        let msg =
            check(&Grants::default(), "plugins.x.grants", &scope(), &Call::Lock { key: "k", op: LockOp::Acquire })
                .expect_err("denied")
                .to_string();
        assert_eq!(msg, "lock: not granted (add [plugins.x.grants.lock] to cradle.toml)");
    }

    #[test]
    fn proxmox_vmid_outside_the_range_is_denied() {
        let msg = denied(Call::Proxmox(ProxmoxCall { node: Some("pve1"), vmid: Some(5000), ..Default::default() }));
        assert!(msg.contains("vmid 5000 is outside plugins.direct.grants.proxmox.vmids = \"100-199\""), "{msg}");
        allowed(Call::Proxmox(ProxmoxCall { node: Some("pve1"), vmid: Some(150), ..Default::default() }));
    }

    #[test]
    fn proxmox_unknown_node_and_migration_target_are_denied() {
        assert!(
            denied(Call::Proxmox(ProxmoxCall { node: Some("pve9"), ..Default::default() })).contains("node `pve9`")
        );
        let m =
            denied(Call::Proxmox(ProxmoxCall { node: Some("pve1"), target_node: Some("pve3"), ..Default::default() }));
        assert!(m.contains("node `pve3`"), "{m}");
    }

    #[test]
    fn proxmox_ungranted_storage_is_denied() {
        assert!(
            denied(Call::Proxmox(ProxmoxCall { storage: Some("ceph"), ..Default::default() }))
                .contains("storage `ceph`")
        );
    }

    #[test]
    fn proxmox_ungranted_template_is_denied_by_name_and_vmid() {
        let m = denied(Call::Proxmox(ProxmoxCall { template: Some((9000, Some("ubuntu"))), ..Default::default() }));
        assert!(m.contains("template `ubuntu` (9000)"), "{m}");
        allowed(Call::Proxmox(ProxmoxCall { template: Some((9000, Some("debian-12"))), ..Default::default() }));
        allowed(Call::Proxmox(ProxmoxCall { template: Some((9001, None)), ..Default::default() }));
    }

    #[test]
    fn proxmox_destructive_calls_need_the_destructive_grant() {
        let m = denied(Call::Proxmox(ProxmoxCall { vmid: Some(150), destructive: true, ..Default::default() }));
        assert!(m.contains("destructive = true"), "{m}");
    }

    fn set_config(set: &[(&str, &str)], delete: &[&str], current: &[(&str, &str)]) -> ConfigScope {
        use crate::contract::bindings::cradle::host::types::Entry;
        let e = |(k, v): &(&str, &str)| Entry { key: k.to_string(), value: v.to_string() };
        let set: Vec<Entry> = set.iter().map(e).collect();
        let current: Vec<Entry> = current.iter().map(e).collect();
        let delete: Vec<String> = delete.iter().map(|d| d.to_string()).collect();
        crate::caps::proxmox::config_scope::describe(&set, &delete, Some(&current))
    }

    fn config_call(scope: &ConfigScope) -> Call<'_> {
        Call::Proxmox(ProxmoxCall {
            config: Some(scope),
            ..ProxmoxCall { node: Some("pve1"), vmid: Some(150), ..Default::default() }
        })
    }

    #[test]
    fn set_config_with_a_second_disk_on_an_ungranted_storage_is_denied() {
        let c = set_config(&[("scsi1", "local-lvm:1"), ("scsi2", "local:1")], &[], &[]);
        let m = denied(config_call(&c));
        assert!(m.contains("key `scsi2` names storage `local`"), "{m}");
    }

    #[test]
    fn set_config_with_a_hookscript_or_args_is_denied_unless_the_grant_lists_the_key() {
        let c = set_config(&[("hookscript", "local-lvm:snippets/evil.sh")], &[], &[]);
        assert!(denied(config_call(&c)).contains("proxmox.node_keys lists \"hookscript\""));
        let c = set_config(&[("args", "-chardev file,id=x,path=/etc/shadow")], &[], &[]);
        assert!(denied(config_call(&c)).contains("key `args` runs code on the node"));
        let c = set_config(&[("hostpci0", "0000:01:00.0")], &[], &[]);
        assert!(denied(config_call(&c)).contains("lists \"hostpci\""));
        let mut g = grants();
        g.proxmox.as_mut().expect("proxmox").node_keys = vec!["args".into()];
        let c = set_config(&[("args", "-cpu host")], &[], &[]);
        check(&g, "p", &scope(), &config_call(&c)).expect("listed node key");
    }

    #[test]
    fn set_config_with_a_snippet_of_another_vm_is_denied() {
        let c = set_config(&[("cicustom", "user=local-lvm:snippets/prod-db-user.yaml")], &[], &[]);
        let m = denied(config_call(&c));
        assert!(m.contains("`local-lvm:snippets/prod-db-user.yaml`, which is not this VM's"), "{m}");
        // The VM's own snippet under another part's name is not its own either.
        let c = set_config(&[("cicustom", "user=local-lvm:snippets/test-0-meta.yaml")], &[], &[]);
        assert!(denied(config_call(&c)).contains("not this VM's"));
        let own = "user=local-lvm:snippets/test-0-user.yaml,network=local-lvm:snippets/test-0-network.yaml,meta=local-lvm:snippets/test-0-meta.yaml";
        allowed(config_call(&set_config(&[("cicustom", own)], &[], &[])));
    }

    #[test]
    fn set_config_with_a_snippet_on_an_ungranted_storage_is_denied() {
        let c = set_config(&[("cicustom", "user=local:snippets/test-0-user.yaml")], &[], &[]);
        assert!(denied(config_call(&c)).contains("(user) names storage `local`"));
    }

    #[test]
    fn set_config_with_a_snippet_for_a_vm_outside_the_call_is_denied() {
        let c = set_config(&[("cicustom", "user=local-lvm:snippets/test-1-user.yaml")], &[], &[]);
        let call =
            Call::Proxmox(ProxmoxCall { node: Some("pve1"), vmid: Some(151), config: Some(&c), ..Default::default() });
        assert!(denied(call).contains("VMID 151 is not a VM of this call"));
    }

    #[test]
    fn set_config_attaching_a_disk_of_a_vm_outside_the_grant_is_denied() {
        let c = set_config(&[("scsi3", "local-lvm:vm-5000-disk-0")], &[], &[]);
        let m = denied(config_call(&c));
        assert!(m.contains("a volume of VMID 5000, outside plugins.direct.grants.proxmox.vmids"), "{m}");
        let c = set_config(&[("scsi1", "local-lvm:0,import-from=local-lvm:vm-5000-disk-0")], &[], &[]);
        assert!(denied(config_call(&c)).contains("VMID 5000"));
        allowed(config_call(&set_config(&[("scsi3", "local-lvm:vm-150-disk-1")], &[], &[])));
    }

    #[test]
    fn set_config_attaching_a_bare_template_disk_is_denied_but_the_own_linked_clone_form_is_not() {
        let c = set_config(&[("scsi1", "local-lvm:base-9000-disk-0")], &[], &[]);
        assert!(denied(config_call(&c)).contains("a template's base disk"));
        allowed(config_call(&set_config(&[("scsi0", "local-lvm:base-9000-disk-0/vm-150-disk-0,size=3G")], &[], &[])));
        let other = set_config(&[("scsi0", "local-lvm:base-9000-disk-0/vm-5000-disk-0")], &[], &[]);
        assert!(denied(config_call(&other)).contains("VMID 5000"));
    }

    #[test]
    fn set_config_naming_a_host_path_or_an_unattributable_volume_is_denied() {
        let c = set_config(&[("sata1", "/dev/sda")], &[], &[]);
        assert!(denied(config_call(&c)).contains("a path on the node"));
        let c = set_config(&[("scsi1", "local-lvm:0,import-from=/etc/shadow")], &[], &[]);
        assert!(denied(config_call(&c)).contains("`/etc/shadow`"));
        let c = set_config(&[("scsi1", "local-lvm:somebodys-disk")], &[], &[]);
        assert!(denied(config_call(&c)).contains("does not say which VM owns it"));
    }

    #[test]
    fn set_config_deleting_a_disk_needs_the_destructive_grant() {
        let current =
            [("scsi0", "local-lvm:vm-150-disk-0,size=20G"), ("ide2", "local-lvm:vm-150-cloudinit,media=cdrom")];
        let c = set_config(&[], &["scsi0"], &current);
        let m = denied(config_call(&c));
        assert!(m.contains("deleting `scsi0` (it holds local-lvm:vm-150-disk-0) removes a disk"), "{m}");
        assert!(m.contains("destructive = true"), "{m}");
        assert!(denied(config_call(&set_config(&[], &["unused0"], &current))).contains("deleting `unused0`"));
        // Finalization's drive removal is not destructive.
        allowed(config_call(&set_config(&[], &["ide2"], &current)));
        let mut g = grants();
        g.proxmox.as_mut().expect("proxmox").destructive = true;
        check(&g, "p", &scope(), &config_call(&c)).expect("granted");
    }

    #[test]
    fn rewriting_an_ha_rule_that_holds_a_vm_outside_the_grant_is_denied() {
        let rule =
            HaRuleScope { rule: "prod-rule", new_members: vec![150], current_members: vec![5000], nodes: vec!["pve1"] };
        let m = denied(Call::Proxmox(ProxmoxCall { ha_rule: Some(rule), ..Default::default() }));
        assert!(m.contains("HA rule `prod-rule` currently holds vm:5000, outside"), "{m}");
        let rule = HaRuleScope { rule: "r", new_members: vec![150, 5000], current_members: vec![], nodes: vec![] };
        assert!(
            denied(Call::Proxmox(ProxmoxCall { ha_rule: Some(rule), ..Default::default() }))
                .contains("would hold vm:5000")
        );
        let rule = HaRuleScope { rule: "r", new_members: vec![150], current_members: vec![151], nodes: vec!["pve9"] };
        assert!(
            denied(Call::Proxmox(ProxmoxCall { ha_rule: Some(rule), ..Default::default() })).contains("node `pve9`")
        );
        let rule = HaRuleScope { rule: "r", new_members: vec![150], current_members: vec![151], nodes: vec!["pve2"] };
        allowed(Call::Proxmox(ProxmoxCall { ha_rule: Some(rule), ..Default::default() }));
    }

    #[test]
    fn a_destructive_denial_under_built_in_default_grants_says_to_write_the_section() {
        let mut g = grants();
        g.builtin_defaults = true;
        let call = Call::Proxmox(ProxmoxCall { vmid: Some(150), destructive: true, ..Default::default() });
        let m = check(&g, "plugins.direct.grants", &scope(), &call).expect_err("denied").to_string();
        assert!(
            m.contains("set plugins.direct.grants.proxmox.destructive = true")
                && m.contains("built-in plugin's default grants"),
            "{m}"
        );
    }

    #[test]
    fn ssh_to_a_host_outside_the_run_is_denied() {
        assert!(denied(ssh("cradle", "10.9.9.9", 22)).contains("host `cradle@10.9.9.9:22`"));
        allowed(ssh("cradle", "127.0.10.5", 22));
        allowed(ssh("root", "127.0.1.1", 22));
    }

    #[test]
    fn ssh_to_a_guest_as_another_user_is_denied_naming_the_granted_login() {
        let m = denied(ssh("root", "127.0.10.5", 22));
        assert!(m.contains("`root@127.0.10.5:22` is not a granted login"), "{m}");
        assert!(
            m.contains(
                "plugins.direct.grants.ssh.hosts allows 127.0.10.5 only as the guest test-0 as cradle@127.0.10.5:22"
            ),
            "{m}"
        );
    }

    #[test]
    fn ssh_to_a_guest_on_another_port_is_denied() {
        let m = denied(ssh("cradle", "127.0.10.5", 33599));
        assert!(m.contains("`cradle@127.0.10.5:33599` is not a granted login"), "{m}");
        assert!(m.contains("plugins.direct.grants.ssh.hosts"), "{m}");
    }

    #[test]
    fn ssh_to_a_node_as_another_user_or_port_is_denied() {
        assert!(denied(ssh("admin", "127.0.1.1", 22)).contains("only as the node as root@127.0.1.1:22"));
        assert!(denied(ssh("root", "127.0.1.1", 2222)).contains("not a granted login"));
    }

    #[test]
    fn ssh_literal_hosts_scope_user_and_port_when_written() {
        let g: Grants = toml::from_str("[ssh]\nhosts = [\"backup@10.0.0.9:2222\", \"10.0.0.8\", \"[fd00::1]:2200\"]")
            .expect("grants");
        let check = |c: Call<'_>| super::check(&g, "p", &RunScope::default(), &c);
        check(ssh("backup", "10.0.0.9", 2222)).expect("the written login");
        assert!(check(ssh("root", "10.0.0.9", 2222)).is_err(), "another user");
        assert!(check(ssh("backup", "10.0.0.9", 22)).is_err(), "another port");
        check(ssh("anyone", "10.0.0.8", 22)).expect("no user written: any user, port 22");
        assert!(check(ssh("anyone", "10.0.0.8", 2222)).is_err(), "no port written: 22 only");
        check(ssh("u", "fd00::1", 2200)).expect("bracketed IPv6 with a port");
    }

    #[test]
    fn ssh_upload_outside_the_granted_dirs_is_denied_including_traversal() {
        assert!(denied(upload("127.0.1.1", "/etc/passwd")).contains("outside"));
        assert!(denied(upload("127.0.1.1", "/var/lib/vz/snippets/../../../etc/x")).contains("outside"));
        assert!(denied(upload("127.0.1.1", "/var/lib/vz/snippets")).contains("outside"));
        allowed(upload("127.0.1.1", "/var/lib/vz/snippets/test-0-user.yaml"));
    }

    #[test]
    fn a_plugin_pinning_a_node_host_key_is_denied() {
        let m = denied(host_key("127.0.1.1", 22));
        assert!(m.contains("host-key trust of `127.0.1.1` is operator-only: it is a cluster node"), "{m}");
    }

    #[test]
    fn a_plugin_pinning_a_host_key_of_a_host_that_is_not_its_guest_is_denied() {
        let m = denied(host_key("10.9.9.9", 22));
        assert!(m.contains("host-key trust of `10.9.9.9:22` is operator-only"), "{m}");
        let m = denied(host_key("127.0.10.5", 2222));
        assert!(m.contains("`127.0.10.5:2222` is operator-only"), "another port of the guest: {m}");
    }

    #[test]
    fn a_plugin_pinning_the_host_key_of_a_guest_its_run_does_not_own_is_denied() {
        let mut s = scope();
        s.vms[0].owned = false;
        let m = check(&grants(), "plugins.direct.grants", &s, &host_key("127.0.10.5", 22)).expect_err("denied");
        assert!(m.to_string().contains("does not hold the VM's lock"), "{m}");
    }

    #[test]
    fn a_plugin_may_pin_the_host_key_of_a_guest_its_run_owns() {
        allowed(host_key("127.0.10.5", 22));
    }

    #[test]
    fn the_operator_workflow_may_pin_node_host_keys() {
        let s = RunScope { operator: true, ..scope() };
        check(&grants(), "workflow.grants", &s, &host_key("127.0.1.1", 22)).expect("operator");
        assert!(check(&grants(), "workflow.grants", &s, &host_key("10.9.9.9", 22)).is_err(), "still inside the grant");
    }

    #[test]
    fn dns_outside_the_granted_zones_is_denied() {
        assert!(denied(Call::Dns { zone: "corp.example.", name: "a.corp.example." }).contains("zone `corp.example.`"));
        assert!(denied(Call::Dns { zone: "lab.example", name: "evil.other." }).contains("not inside zone"));
        allowed(Call::Dns { zone: "LAB.example", name: "test-0.lab.example." });
    }

    #[test]
    fn lock_keys_outside_the_prefixes_are_denied() {
        assert!(denied(Call::Lock { key: "other|x", op: LockOp::Acquire }).contains("key `other|x`"));
        allowed(Call::Lock { key: "https://pve:8006|test-0", op: LockOp::Acquire });
    }

    #[test]
    fn a_plugin_releasing_a_lock_it_did_not_acquire_is_denied() {
        let m = denied(release("https://pve:8006|test-0", false));
        assert!(m.contains("release of `https://pve:8006|test-0`: this plugin did not acquire it in this run"), "{m}");
        allowed(release("https://pve:8006|test-0", true));
    }

    #[test]
    fn the_operator_workflow_may_release_a_lock_it_did_not_acquire() {
        let s = RunScope { operator: true, ..scope() };
        check(&grants(), "workflow.grants", &s, &release("https://pve:8006|test-0", false)).expect("operator");
    }

    #[test]
    fn creation_reservations_need_the_checkpoint_grant() {
        allowed(Call::Reservations);
        let m = check(&Grants::default(), "workflow.grants", &scope(), &Call::Reservations).expect_err("denied");
        assert!(m.to_string().contains("add [workflow.grants.checkpoint]"), "{m}");
    }

    #[test]
    fn checkpoints_of_other_vms_are_denied() {
        assert!(denied(Call::Checkpoint { vm_name: "prod-db" }).contains("VM `prod-db`"));
        allowed(Call::Checkpoint { vm_name: "test-0" });
    }

    #[test]
    fn terraform_modules_must_be_plain_directory_names() {
        let g: Grants = toml::from_str("[terraform]\nmodule_root = \"/srv/tf\"").expect("grants");
        for bad in ["../etc", "a/b", "", "/abs"] {
            assert!(check(&g, "p", &scope(), &Call::Terraform { module: bad }).is_err(), "{bad}");
        }
        check(&g, "p", &scope(), &Call::Terraform { module: "test-0" }).expect("plain name");
    }

    #[test]
    fn http_to_an_unlisted_endpoint_is_denied() {
        assert!(denied(Call::Http { endpoint: "unifi" }).contains("endpoint `unifi`"));
        allowed(Call::Http { endpoint: "netbox" });
    }
}
