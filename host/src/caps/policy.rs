//! The one permission check every capability call goes through.
//!
//! [`check`] compares a [`Call`] (the scope-relevant arguments of one host call)
//! with the [`Grants`] of the caller and the [`RunScope`] of the call (the VMs
//! the call is bound to, the cluster's nodes). It performs no I/O and has no side
//! effects; the caller journals a [`Denied`] and returns it to the plugin as the
//! WIT `denied` error. Every denied case has a test below.

use std::path::{Component, Path};

use super::Capability;
use super::grants::{Grants, TemplateRef, list_allows};

/// The VMs and nodes one call (or one workflow run) is bound to.
#[derive(Debug, Clone, Default)]
pub struct RunScope {
    /// The VMs in scope.
    pub vms: Vec<ScopedVm>,
    /// SSH addresses of the cluster's nodes (for the `"nodes"` ssh grant).
    pub nodes: Vec<String>,
}

/// One VM in scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopedVm {
    /// Canonical name.
    pub name: String,
    /// VMID.
    pub vmid: u32,
    /// The address SSH reaches it on, if known.
    pub ssh_host: Option<String>,
}

/// The scope-relevant arguments of one host call.
#[derive(Debug, Clone)]
pub enum Call<'a> {
    /// A Proxmox API call.
    Proxmox(ProxmoxCall<'a>),
    /// An SSH call; `upload` is the remote path for uploads.
    Ssh {
        /// The host connected to.
        host: &'a str,
        /// The remote file written, for uploads.
        upload: Option<&'a str>,
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
    },
    /// A checkpoint operation.
    Checkpoint {
        /// The VM the checkpoint belongs to.
        vm_name: &'a str,
    },
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

impl Call<'_> {
    /// The capability this call belongs to.
    pub fn capability(&self) -> Capability {
        match self {
            Call::Proxmox(_) => Capability::Proxmox,
            Call::Ssh { .. } => Capability::Ssh,
            Call::Dns { .. } => Capability::Dns,
            Call::Lock { .. } => Capability::Lock,
            Call::Checkpoint { .. } => Capability::Checkpoint,
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
        Call::Proxmox(p) => check_proxmox(grants, origin, p).map_err(|scope| Denied { capability: cap, scope }),
        Call::Ssh { host, upload } => {
            let Some(g) = &grants.ssh else { return deny(String::new()) };
            let host_ok = g.hosts.iter().any(|h| match h.as_str() {
                "*" => true,
                "guests" => scope.vms.iter().any(|vm| vm.ssh_host.as_deref() == Some(host)),
                "nodes" => scope.nodes.iter().any(|n| n == host),
                literal => literal == *host,
            });
            if !host_ok {
                return deny(format!(
                    "host `{host}` is not one of this call's guests or nodes, nor listed in {origin}.ssh.hosts"
                ));
            }
            if let Some(path) = upload
                && !inside_any(path, &g.upload_dirs)
            {
                return deny(format!(
                    "upload to `{path}` is outside {origin}.ssh.upload_dirs ({})",
                    g.upload_dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
                ));
            }
            Ok(())
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
        Call::Lock { key } => {
            let Some(g) = &grants.lock else { return deny(String::new()) };
            if !g.prefixes.iter().any(|p| p == "*" || key.starts_with(p.as_str())) {
                return deny(format!("key `{key}` does not start with a prefix in {origin}.lock.prefixes"));
            }
            Ok(())
        }
        Call::Checkpoint { vm_name } => {
            if !scope.vms.iter().any(|vm| vm.name == *vm_name) {
                return deny(format!("VM `{vm_name}` is not a VM of this call (checkpoints are per VM)"));
            }
            Ok(())
        }
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

fn check_proxmox(grants: &Grants, origin: &str, p: &ProxmoxCall<'_>) -> Result<(), String> {
    let Some(g) = &grants.proxmox else { return Err(String::new()) };
    for node in [p.node, p.target_node].into_iter().flatten() {
        if !list_allows(&g.nodes, node) {
            return Err(format!("node `{node}` is not in {origin}.proxmox.nodes"));
        }
    }
    if let Some(vmid) = p.vmid
        && !g.vmids.contains(vmid)
    {
        return Err(format!("vmid {vmid} is outside {origin}.proxmox.vmids = \"{}\"", g.vmids));
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
    if p.destructive && !g.destructive {
        return Err(format!("destructive calls are not granted (set {origin}.proxmox.destructive = true)"));
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

    fn scope() -> RunScope {
        RunScope {
            vms: vec![ScopedVm { name: "test-0".into(), vmid: 150, ssh_host: Some("127.0.10.5".into()) }],
            nodes: vec!["127.0.1.1".into()],
        }
    }

    fn denied(call: Call<'_>) -> String {
        check(&grants(), "plugins.direct.grants", &scope(), &call).expect_err("must be denied").to_string()
    }

    fn allowed(call: Call<'_>) {
        check(&grants(), "plugins.direct.grants", &scope(), &call).expect("must be allowed");
    }

    #[test]
    fn an_ungranted_capability_is_denied_naming_the_section_to_add() {
        let msg = check(&Grants::default(), "plugins.x.grants", &scope(), &Call::Lock { key: "k" })
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

    #[test]
    fn ssh_to_a_host_outside_the_run_is_denied() {
        assert!(denied(Call::Ssh { host: "10.9.9.9", upload: None }).contains("host `10.9.9.9`"));
        allowed(Call::Ssh { host: "127.0.10.5", upload: None });
        allowed(Call::Ssh { host: "127.0.1.1", upload: None });
    }

    #[test]
    fn ssh_upload_outside_the_granted_dirs_is_denied_including_traversal() {
        assert!(denied(Call::Ssh { host: "127.0.1.1", upload: Some("/etc/passwd") }).contains("outside"));
        assert!(
            denied(Call::Ssh { host: "127.0.1.1", upload: Some("/var/lib/vz/snippets/../../../etc/x") })
                .contains("outside")
        );
        assert!(denied(Call::Ssh { host: "127.0.1.1", upload: Some("/var/lib/vz/snippets") }).contains("outside"));
        allowed(Call::Ssh { host: "127.0.1.1", upload: Some("/var/lib/vz/snippets/test-0-user.yaml") });
    }

    #[test]
    fn dns_outside_the_granted_zones_is_denied() {
        assert!(denied(Call::Dns { zone: "corp.example.", name: "a.corp.example." }).contains("zone `corp.example.`"));
        assert!(denied(Call::Dns { zone: "lab.example", name: "evil.other." }).contains("not inside zone"));
        allowed(Call::Dns { zone: "LAB.example", name: "test-0.lab.example." });
    }

    #[test]
    fn lock_keys_outside_the_prefixes_are_denied() {
        assert!(denied(Call::Lock { key: "other|x" }).contains("key `other|x`"));
        allowed(Call::Lock { key: "https://pve:8006|test-0" });
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
