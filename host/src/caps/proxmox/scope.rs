//! The `proxmox` capability's scope: its grant section
//! (`[...grants.proxmox]`: [`ProxmoxGrant`]), what of a call the grant looks
//! at ([`ProxmoxCall`]: node, VMID, storage, template, destructive, the
//! values of a `set-config` as [`ConfigScope`] describes them, an HA rule's
//! members), and the rules that compare the two. Checked through
//! [`crate::caps::policy::check`] like every call.

use std::path::{Component, Path};

use serde::Deserialize;

use super::config_scope::{ConfigScope, NODE_KEYS, Touch, node_key};
use crate::caps::policy::{Caller, Grant, GrantError, OutOfScope, list_allows};

/// `[...grants.proxmox]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxmoxGrant {
    /// Nodes calls may name (`["*"]` for any).
    #[serde(default)]
    pub nodes: Vec<String>,
    /// The VMIDs calls may touch, `"100-199"`.
    pub vmids: VmidRange,
    /// Storages calls may name (`["*"]` for any).
    #[serde(default)]
    pub storages: Vec<String>,
    /// Templates that may be cloned, by name or VMID (`["*"]` for any).
    #[serde(default)]
    pub templates: Vec<TemplateRef>,
    /// Whether destroy, hard stop/reset, HA removal and deleting a disk
    /// through `set-config` are allowed.
    #[serde(default)]
    pub destructive: bool,
    /// Config keys that run code on the node or hand the guest a host
    /// resource (`hookscript`, `args`, `hostpci`, `usb`, `serial`, `parallel`,
    /// `virtiofs`, `ivshmem`; a name covers its numbered keys): `set-config`
    /// may set them only when listed here. Empty by default.
    #[serde(default)]
    pub node_keys: Vec<String>,
    /// Absolute directories on the nodes whose files a new disk may be
    /// imported from (`import-from=/var/tmp/cradle-images/x.qcow2`). Empty by
    /// default: an import from a path on the node is refused.
    #[serde(default)]
    pub import_dirs: Vec<std::path::PathBuf>,
}

/// Why a `vmids = "..."` grant is not a VMID range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VmidRangeError {
    /// A part is not a number.
    #[error("vmids = \"{range}\": `{token}` is not a VMID; write \"100-199\"")]
    NotAVmid {
        /// The range as written.
        range: String,
        /// The part that is not a VMID.
        token: String,
    },
    /// Outside what PVE accepts.
    #[error("vmids = \"{range}\": Proxmox VMIDs are 100..999999999")]
    OutsidePve {
        /// The range as written.
        range: String,
    },
    /// The first VMID is above the last.
    #[error("vmids = \"{range}\": the first VMID is above the last")]
    Reversed {
        /// The range as written.
        range: String,
    },
}

/// An inclusive VMID range, written `"100-199"` or `"150"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmidRange {
    /// First VMID.
    pub first: u32,
    /// Last VMID (inclusive).
    pub last: u32,
}

impl VmidRange {
    /// Whether `vmid` is inside the range.
    pub fn contains(&self, vmid: u32) -> bool {
        (self.first..=self.last).contains(&vmid)
    }

    /// Parse `"100-199"` or `"150"`.
    pub fn parse(s: &str) -> Result<VmidRange, VmidRangeError> {
        let num = |t: &str| {
            t.trim().parse::<u32>().map_err(|_| VmidRangeError::NotAVmid { range: s.to_string(), token: t.to_string() })
        };
        let (first, last) = match s.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let v = num(s)?;
                (v, v)
            }
        };
        if first < 100 || last > 999_999_999 {
            return Err(VmidRangeError::OutsidePve { range: s.to_string() });
        }
        if first > last {
            return Err(VmidRangeError::Reversed { range: s.to_string() });
        }
        Ok(VmidRange { first, last })
    }
}

impl std::fmt::Display for VmidRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

impl<'de> Deserialize<'de> for VmidRange {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        VmidRange::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A template, by VMID or by name.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum TemplateRef {
    /// By VMID.
    Vmid(u32),
    /// By name (or `"*"`).
    Name(String),
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

impl Grant for ProxmoxGrant {
    type Call<'a> = ProxmoxCall<'a>;

    fn validate(&self) -> Result<(), GrantError> {
        for key in &self.node_keys {
            if !NODE_KEYS.contains(&key.as_str()) {
                return Err(GrantError {
                    key: "proxmox.node_keys",
                    value: key.clone(),
                    problem: format!("is not a node key (known: {})", NODE_KEYS.join(", ")),
                });
            }
        }
        for dir in &self.import_dirs {
            let plain = dir.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
            if !dir.is_absolute() || !plain {
                return Err(GrantError {
                    key: "proxmox.import_dirs",
                    value: dir.display().to_string(),
                    problem: "must be an absolute directory on the nodes without `.`/`..`".into(),
                });
            }
        }
        Ok(())
    }

    fn check(&self, caller: &Caller<'_>, p: &ProxmoxCall<'_>) -> Result<(), OutOfScope> {
        check_proxmox(self, caller, p)
    }
}

fn check_proxmox(g: &ProxmoxGrant, caller: &Caller<'_>, p: &ProxmoxCall<'_>) -> Result<(), OutOfScope> {
    let origin = caller.origin;
    let vmids_hint = || format!("{origin}.proxmox.vmids = \"{}\"", g.vmids);
    for node in [p.node, p.target_node].into_iter().flatten() {
        if !list_allows(&g.nodes, node) {
            return Err(format!("node `{node}` is not in {origin}.proxmox.nodes").into());
        }
    }
    if let Some(vmid) = p.vmid
        && !g.vmids.contains(vmid)
    {
        return Err(format!("vmid {vmid} is outside {}", vmids_hint()).into());
    }
    if let Some(storage) = p.storage
        && !list_allows(&g.storages, storage)
    {
        return Err(format!("storage `{storage}` is not in {origin}.proxmox.storages").into());
    }
    if let Some((vmid, name)) = p.template {
        let ok = g.templates.iter().any(|t| match t {
            TemplateRef::Vmid(v) => *v == vmid,
            TemplateRef::Name(n) => n == "*" || Some(n.as_str()) == name,
        });
        if !ok {
            let label = name.map(|n| format!("`{n}` ({vmid})")).unwrap_or_else(|| vmid.to_string());
            return Err(format!("template {label} is not in {origin}.proxmox.templates").into());
        }
    }
    if let Some(rule) = &p.ha_rule {
        let id = rule.rule;
        for vmid in &rule.new_members {
            if !g.vmids.contains(*vmid) {
                return Err(format!("HA rule `{id}` would hold vm:{vmid}, outside {}", vmids_hint()).into());
            }
        }
        for vmid in &rule.current_members {
            if !g.vmids.contains(*vmid) {
                return Err(format!(
                    "HA rule `{id}` currently holds vm:{vmid}, outside {}: a rule holding VMs outside the grant \
                     cannot be rewritten",
                    vmids_hint()
                )
                .into());
            }
        }
        for node in &rule.nodes {
            if !list_allows(&g.nodes, node) {
                return Err(
                    format!("HA rule `{id}` names node `{node}`, which is not in {origin}.proxmox.nodes").into()
                );
            }
        }
    }
    if let Some(config) = p.config {
        check_config(g, caller, p.vmid, config)?;
    }
    if p.destructive && !g.destructive {
        return Err(format!("destructive calls are not granted ({})", destructive_hint(caller)).into());
    }
    Ok(())
}

/// How to grant destructive calls; the built-in defaults have no section to edit.
fn destructive_hint(caller: &Caller<'_>) -> String {
    let origin = caller.origin;
    if caller.builtin_defaults {
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
    caller: &Caller<'_>,
    vmid: Option<u32>,
    config: &ConfigScope,
) -> Result<(), OutOfScope> {
    let origin = caller.origin;
    let this = vmid.map(|v| v.to_string()).unwrap_or_else(|| "?".into());
    for touch in &config.touches {
        match touch {
            Touch::Storage { key, storage } => {
                if !list_allows(&g.storages, storage) {
                    return Err(format!(
                        "key `{key}` names storage `{storage}`, which is not in {origin}.proxmox.storages"
                    )
                    .into());
                }
            }
            Touch::Volume { key, volid, storage, owner, bare_base } => {
                if *bare_base {
                    return Err(format!(
                        "key `{key}` attaches `{volid}`, a template's base disk; a base disk may appear only as \
                         this VM's own linked-clone base (`base-N-disk-M/vm-{this}-disk-K`)"
                    )
                    .into());
                }
                if !g.vmids.contains(*owner) {
                    return Err(format!(
                        "key `{key}` attaches `{volid}`, a volume of VMID {owner}, outside {origin}.proxmox.vmids = \"{}\"",
                        g.vmids
                    ).into());
                }
                if !list_allows(&g.storages, storage) {
                    return Err(format!(
                        "key `{key}` names storage `{storage}`, which is not in {origin}.proxmox.storages"
                    )
                    .into());
                }
            }
            Touch::Snippet { key, part, volid, storage, file } => {
                if !list_allows(&g.storages, storage) {
                    return Err(format!(
                        "key `{key}` ({part}) names storage `{storage}`, which is not in {origin}.proxmox.storages"
                    )
                    .into());
                }
                let Some(vm) = caller.scope.vms.iter().find(|v| Some(v.vmid) == vmid) else {
                    return Err(format!(
                        "key `{key}` ({part}) names snippet `{volid}`, but VMID {this} is not a VM of this call, so \
                         its snippets are unknown"
                    )
                    .into());
                };
                let Ok(names) = crate::cloudinit::snippet_names(&vm.name) else {
                    return Err(format!(
                        "key `{key}` ({part}) names snippet `{volid}`, but `{}` (VMID {this}) is not a VM name \
                         snippets can be named after",
                        vm.name
                    )
                    .into());
                };
                let own = [(&names.user, "user"), (&names.network, "network"), (&names.meta, "meta")];
                if !own.iter().any(|(n, p)| *n == file && p == part) {
                    return Err(format!(
                        "key `{key}` ({part}) names snippet `{volid}`, which is not this VM's: {} may use only \
                         {}, {} and {} as user, network and meta",
                        names.vm, names.user, names.network, names.meta
                    )
                    .into());
                }
            }
            Touch::ImportPath { key, path } => {
                let p = Path::new(path);
                let plain = p.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
                if !plain || !g.import_dirs.iter().any(|d| p.starts_with(d) && p != d) {
                    return Err(format!(
                        "key `{key}` imports `{path}`, a file on the node outside {origin}.proxmox.import_dirs \
                         (granted: {:?}); upload the image into one of them",
                        g.import_dirs
                    )
                    .into());
                }
            }
            Touch::NodeKey { key } => {
                let base = node_key(key).unwrap_or(key.as_str());
                if !g.node_keys.iter().any(|k| k == base) {
                    return Err(format!(
                        "key `{key}` runs code on the node or passes a host resource to the guest; it is refused \
                         unless {origin}.proxmox.node_keys lists \"{base}\""
                    )
                    .into());
                }
            }
            Touch::Unattributable { key, value, why } => {
                return Err(format!(
                    "key `{key}` names `{value}`, which is {why}; only volumes of VMs in {origin}.proxmox.vmids on \
                     granted storages may be attached"
                )
                .into());
            }
            Touch::DeletesDisk { key, holds } => {
                if !g.destructive {
                    return Err(format!(
                        "deleting `{key}` (it holds {holds}) removes a disk from VM {this}: destructive calls are not \
                         granted ({})",
                        destructive_hint(caller)
                    )
                    .into());
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caps::Call;
    use crate::caps::policy::check;
    use crate::caps::policy::fixture::{allowed, denied, grants, scope};

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
        super::super::config_scope::describe(&set, &delete, Some(&current))
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
    fn create_vm_importing_a_node_file_outside_the_import_dirs_is_denied() {
        let c = set_config(&[("scsi0", "local-lvm:0,import-from=/var/tmp/cradle-images/haos.qcow2")], &[], &[]);
        let m = denied(config_call(&c));
        assert!(m.contains("imports `/var/tmp/cradle-images/haos.qcow2`, a file on the node outside"), "{m}");
        let mut g = grants();
        g.proxmox.as_mut().expect("proxmox").import_dirs = vec!["/var/tmp/cradle-images".into()];
        check(&g, "p", &scope(), &config_call(&c)).expect("inside the import dir");
        // `..` cannot climb out of a granted directory, and the directory itself is no file.
        for path in ["/var/tmp/cradle-images/../../etc/shadow", "/var/tmp/cradle-images", "/var/tmp/cradle-imagesX/a"] {
            let c = set_config(&[("scsi0", &format!("local-lvm:0,import-from={path}"))], &[], &[]);
            let m = check(&g, "p", &scope(), &config_call(&c)).expect_err(path).to_string();
            assert!(m.contains("outside p.proxmox.import_dirs"), "{m}");
        }
    }

    #[test]
    fn create_vm_importing_from_an_ungranted_storage_or_another_vms_disk_is_denied() {
        let c = set_config(&[("scsi0", "local-lvm:0,import-from=local:import/haos.qcow2")], &[], &[]);
        let m = denied(config_call(&c));
        assert!(m.contains("key `scsi0 (import-from)` names storage `local`"), "{m}");
        let c = set_config(&[("scsi0", "local-lvm:0,import-from=local-lvm:vm-900-disk-0")], &[], &[]);
        let m = denied(config_call(&c));
        assert!(m.contains("a volume of VMID 900"), "{m}");
        let c = set_config(&[("scsi0", "local-lvm:0,import-from=local-lvm:import/haos.qcow2")], &[], &[]);
        check(&grants(), "p", &scope(), &config_call(&c)).expect("an import volume of a granted storage");
    }

    fn container(set: &[(&str, &str)]) -> ConfigScope {
        use crate::contract::bindings::cradle::host::types::Entry;
        let set: Vec<Entry> = set.iter().map(|(k, v)| Entry { key: k.to_string(), value: v.to_string() }).collect();
        super::super::config_scope::describe_container(&set, &[])
    }

    #[test]
    fn a_privileged_container_or_container_features_are_denied_unless_the_grant_lists_them() {
        let c = container(&[("unprivileged", "0"), ("rootfs", "local-lvm:8")]);
        assert!(denied(config_call(&c)).contains("lists \"privileged\""), "{}", denied(config_call(&c)));
        let c = container(&[("features", "nesting=1,mount=nfs")]);
        assert!(denied(config_call(&c)).contains("lists \"features\""));
        let mut g = grants();
        g.proxmox.as_mut().expect("proxmox").node_keys = vec!["privileged".into(), "features".into()];
        let c = container(&[("unprivileged", "0"), ("features", "nesting=1"), ("rootfs", "local-lvm:8")]);
        check(&g, "p", &scope(), &config_call(&c)).expect("granted node keys");
        let c = container(&[("unprivileged", "1"), ("rootfs", "local-lvm:8")]);
        check(&grants(), "p", &scope(), &config_call(&c)).expect("an unprivileged container");
    }

    #[test]
    fn a_container_on_an_ungranted_storage_from_an_ungranted_template_or_with_a_bind_mount_is_denied() {
        let m = denied(config_call(&container(&[("rootfs", "local:8")])));
        assert!(m.contains("key `rootfs` names storage `local`"), "{m}");
        let m = denied(config_call(&container(&[("ostemplate", "local:vztmpl/debian-12.tar.zst")])));
        assert!(m.contains("key `ostemplate` names storage `local`"), "{m}");
        let m = denied(config_call(&container(&[("mp0", "/etc,mp=/mnt/etc")])));
        assert!(m.contains("a path on the node"), "{m}");
        let m = denied(config_call(&container(&[("mp0", "local-lvm:vm-900-disk-1,mp=/data")])));
        assert!(m.contains("a volume of VMID 900"), "{m}");
    }

    #[test]
    fn an_import_dir_grant_must_be_an_absolute_plain_directory() {
        let mut g = grants();
        for bad in ["var/tmp", "/var/tmp/../etc"] {
            g.proxmox.as_mut().expect("proxmox").import_dirs = vec![bad.into()];
            let e = g.validate().expect_err(bad);
            assert!(e.to_string().contains("proxmox.import_dirs"), "{e}");
        }
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
    fn set_config_with_a_snippet_for_a_vm_whose_name_cannot_name_snippets_is_denied() {
        // A VM of the call whose name is not a DNS label (`vms_name` with an
        // underscore) has no snippets of its own: any snippet is refused.
        let mut odd = scope();
        odd.vms[0].name = "test_0".into();
        let c = set_config(&[("cicustom", "user=local-lvm:snippets/test_0-user.yaml")], &[], &[]);
        let m = check(&grants(), "plugins.direct.grants", &odd, &config_call(&c)).expect_err("denied").to_string();
        assert!(m.contains("is not a VM name snippets can be named after"), "{m}");
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
}
